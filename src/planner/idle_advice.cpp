#include "planner/idle_advice.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace ferry {

namespace {

// The best plan for `request`, or nothing where none fits.
std::optional<Prediction> best_prediction(const ModelConfig& config, const ModelLayout& layout,
                                          const MachineProfile& profile, const PlanRequest& request) {
  try {
    return search_plans(config, layout, profile, request, 0).best.prediction;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

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
    const std::optional<Prediction> p = best_prediction(config, layout, profile, larger);
    if (!p || p->gpu_idle_fraction > threshold) continue;
    // The request's batch is one device's share (PlanRequest::devices); the config's is the step's.
    const int64_t step_batch = larger.global_batch * std::max<int64_t>(1, request.devices);
    advice.push_back({fmt::format("global_batch: {}", step_batch),
                      fmt::format("{} tokens a step", step_batch * larger.seq_len), *p});
    break;
  }
  if (request.clipping) {
    PlanRequest unclipped = request;
    unclipped.clipping = false;
    const std::optional<Prediction> p = best_prediction(config, layout, profile, unclipped);
    if (p && (p->gpu_idle_fraction <= threshold || p->gpu_idle_fraction <= 0.5 * best.gpu_idle_fraction))
      advice.push_back({"max_grad_norm: 0", "no clipping: each unit updated as its gradient lands", *p});
  }
  return advice;
}

}  // namespace ferry
