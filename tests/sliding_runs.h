// Runs of the sliding tests' batches (sliding_plans.h): the plain trainer (ModelStep and
// UnitOptimizer on the CPU ops, every unit in host memory), the reference the sliding engine's
// tests hold it to, and the sliding engine on the simulated device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "data/packing.h"
#include "device/device.h"
#include "engine/model_step.h"
#include "engine/sliding_engine.h"
#include "engine/unit_optimizer.h"
#include "model/model_config.h"
#include "ops/device_ops.h"
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

// What a run gives: the losses, norms and masters after each of its kSteps steps.
struct RunResult {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> masters;
};

// plain_state for kSteps steps, as a RunResult.
inline RunResult plain_run(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                           double max_norm, int64_t head_groups = 1) {
  PlainState state = plain_state(config, seed, rows, max_norm, kSteps, head_groups);
  return {std::move(state.losses), std::move(state.norms), std::move(state.masters)};
}

// The sliding engine with `plan` on the simulated device, from the same weights for kSteps steps;
// its device memory stays within the simulated capacity.
inline RunResult sliding_run(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                             double max_norm, const Plan& plan, const SimDeviceOptions& sim = {}) {
  std::vector<std::vector<float>> units;
  init_random_weights(config, seed, units);
  const ModelLayout layout = build_model_layout(config);
  auto device = make_sim_device(sim);
  auto ops = make_device_ops(*device);
  SlidingEngine engine(config, layout, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
  for (size_t u = 0; u < units.size(); ++u) engine.host().unit(u).master.assign(units[u]);
  engine.weights_changed(0);
  RunResult run;
  for (int64_t s = 0; s < kSteps; ++s) {
    const SlidingStepResult r = engine.step(s + 1, batch_for(rows, s), hyper_at(s), max_norm);
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
  }
  engine.finish_updates();
  for (size_t u = 0; u < units.size(); ++u) {
    const HostArray& master = engine.host().unit(u).master;
    run.masters.emplace_back(master.data(), master.data() + master.size());
  }
  EXPECT_LE(device->memory().peak, device->memory().capacity);
  return run;
}

}  // namespace ferry::test
