#include "planner/idle_advice.h"

#include <fmt/format.h>

#include <algorithm>

namespace ferry {

std::vector<IdleAdvice> idle_advice(const ModelConfig& config, const ModelLayout& layout,
                                    const MachineProfile& profile, const PlanRequest& request,
                                    const Prediction& best, double threshold) {
  std::vector<IdleAdvice> advice;
  const double idle_s = best.gpu_idle_fraction * best.step_seconds;
  // The GPU waits, and what it waits for is the CPU pass (not the link: more tokens would not help
  // a plan bound by its uploads as much).
  if (best.gpu_idle_fraction <= threshold || best.critical[static_cast<int>(Lane::Cpu)] < 0.5 * idle_s)
    return advice;

  for (const int64_t factor : {2, 4}) {
    PlanRequest larger = request;
    larger.global_batch = request.global_batch * factor;
    const std::optional<Candidate> c = best_plan_if_any(config, layout, profile, larger);
    if (!c || c->prediction.gpu_idle_fraction > threshold) continue;
    // The request's batch is one device's share (PlanRequest::devices); the config's is the step's.
    const int64_t step_batch = larger.global_batch * std::max<int64_t>(1, request.devices);
    advice.push_back({fmt::format("global_batch: {}", step_batch),
                      fmt::format("{} tokens a step", step_batch * larger.seq_len), c->prediction});
    break;
  }
  if (request.clipping) {
    PlanRequest unclipped = request;
    unclipped.clipping = false;
    const std::optional<Candidate> c = best_plan_if_any(config, layout, profile, unclipped);
    if (c && (c->prediction.gpu_idle_fraction <= threshold ||
              c->prediction.gpu_idle_fraction <= 0.5 * best.gpu_idle_fraction))
      advice.push_back(
          {"max_grad_norm: 0", "no clipping: each unit updated as its gradient lands", c->prediction});
  }
  return advice;
}

}  // namespace ferry
