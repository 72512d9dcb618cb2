// AdamW state (m, v) for every unit, and the step that applies clipping and AdamW to the fp32
// masters exactly as clip_grad_norm_ + torch.optim.AdamW would.
#pragma once

#include <vector>

#include "model/unit_layout.h"
#include "optim/adamw.h"

namespace ferry {

struct UpdateStats {
  double grad_norm = 0.0;  // before clipping
  float clip_coefficient = 1.0f;
};

class UnitOptimizer {
 public:
  // decay_all: apply weight decay to norms and biases too (off by default, as in HF Trainer).
  UnitOptimizer(const ModelLayout& layout, bool decay_all);

  // One optimizer step (t = step, 1-based) on every unit. grads are read, not modified.
  UpdateStats step(const std::vector<float*>& params, const std::vector<const float*>& grads,
                   const AdamWHyper& hyper, double max_grad_norm, int64_t step);

  std::vector<std::vector<float>>& m() { return m_; }
  std::vector<std::vector<float>>& v() { return v_; }
  const std::vector<std::vector<float>>& m() const { return m_; }
  const std::vector<std::vector<float>>& v() const { return v_; }

 private:
  ModelLayout layout_;
  bool decay_all_;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace ferry
