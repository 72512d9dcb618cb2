// The reference the sliding engine's tests hold it to: the plain trainer (ModelStep and
// UnitOptimizer on the CPU ops, every unit in host memory) over the sliding tests' batches
// (sliding_plans.h).
#pragma once

#include <cstdint>
#include <vector>

#include "data/packing.h"
#include "engine/model_step.h"
#include "engine/unit_optimizer.h"
#include "model/model_config.h"
#include "ops/ops.h"
#include "sliding_plans.h"
#include "train/model_init.h"

namespace ferry::test {

struct PlainState {
  std::vector<std::vector<float>> masters, m, v;
  std::vector<double> losses, norms;
};

// `steps` steps from the random weights of `seed`, clipping at `max_norm` (0: none), attention in
// `head_groups` groups of KV heads: the losses, norms and the whole optimizer state after them.
inline PlainState plain_state(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                              double max_norm, int64_t steps, int64_t head_groups = 1) {
  PlainState state;
  init_random_weights(config, seed, state.masters);
  const ModelLayout layout = build_model_layout(config);
  auto ops = make_cpu_ops();
  ModelStep step(config, layout, *ops, kMicro * kSeq, kGlobal / kMicro, 0, head_groups);
  UnitOptimizer opt(layout, false);
  std::vector<std::vector<float>> grads;
  for (const auto& u : layout.units) grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<float*> p, g;
  for (auto& u : state.masters) p.push_back(u.data());
  for (auto& u : grads) g.push_back(u.data());
  for (int64_t s = 0; s < steps; ++s) {
    const StepLoss loss = step.run(p, g, batch_for(rows, s));
    const UpdateStats stats =
        opt.step(p, std::vector<const float*>(g.begin(), g.end()), hyper_at(s), max_norm, s + 1);
    state.losses.push_back(loss.mean());
    state.norms.push_back(stats.grad_norm);
  }
  state.m = opt.m();
  state.v = opt.v();
  return state;
}

}  // namespace ferry::test
