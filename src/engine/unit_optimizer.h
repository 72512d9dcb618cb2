// AdamW state (m, v) for every unit, and the step that applies clipping and AdamW to the fp32
// masters exactly as clip_grad_norm_ + torch.optim.AdamW would -- or, with a lean optimizer_state,
// the lean AdamW (optim/lean_adamw.h) on state in that format, the masters the caller holds being
// then the decoded ones (what the forward reads).
#pragma once

#include <string>
#include <vector>

#include "model/unit_layout.h"
#include "optim/adamw.h"
#include "optim/lean_adamw.h"
#include "optim/state_format.h"

namespace ferry {

struct UpdateStats {
  double grad_norm = 0.0;  // before clipping
  float clip_coefficient = 1.0f;
};

class UnitOptimizer {
 public:
  // decay_all: apply weight decay to norms and biases too (off by default, as in HF Trainer).
  // `seed`: a lean format's stochastic rounding draws from lean_unit_seed(seed, unit).
  UnitOptimizer(const ModelLayout& layout, bool decay_all,
                OptimizerStateFormat format = OptimizerStateFormat::Fp32, uint64_t seed = 0);

  // One optimizer step (t = step, 1-based) on every unit. grads are read, not modified. With a lean
  // format the params are overwritten with the decoded new masters.
  UpdateStats step(const std::vector<float*>& params, const std::vector<const float*>& grads,
                   const AdamWHyper& hyper, double max_grad_norm, int64_t step);

  OptimizerStateFormat format() const { return format_; }
  // fp32: m and v per unit.
  std::vector<std::vector<float>>& m() { return m_; }
  std::vector<std::vector<float>>& v() { return v_; }
  const std::vector<std::vector<float>>& m() const { return m_; }
  const std::vector<std::vector<float>>& v() const { return v_; }

  // Lean formats: unit u's arrays (state_arrays(format) order, including the masters).
  std::vector<std::vector<char>>& lean_arrays(size_t u) { return lean_[u]; }
  // Encodes the masters from fp32 values (loading), and writes the decoded ones back into `params`.
  void assign_masters(const std::vector<float*>& params);
  // Writes the decoded masters into `params` (after the lean arrays were loaded).
  void read_masters(const std::vector<float*>& params) const;

 private:
  ModelLayout layout_;
  bool decay_all_;
  OptimizerStateFormat format_;
  std::vector<std::vector<float>> m_, v_;
  std::vector<std::vector<std::vector<char>>> lean_;
  std::vector<LeanUnitState> views_;
  bool warned_lost_updates_ = false;
};

}  // namespace ferry
