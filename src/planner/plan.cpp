#include "planner/plan.h"

#include <fmt/format.h>

namespace ferry {

const char* placement_name(UnitPlacement p) {
  switch (p) {
    case UnitPlacement::Streamed: return "streamed";
    case UnitPlacement::ResidentParams: return "resident";
    case UnitPlacement::ResidentWithOptimizer: return "resident+optimizer";
  }
  return "?";
}

const char* activation_name(ActivationPlacement p) {
  return p == ActivationPlacement::KeepOnGpu ? "gpu" : "host";
}

const char* weight_upload_name(WeightUpload w) {
  return w == WeightUpload::HostShadow ? "bf16-host-shadow" : "convert-on-upload";
}

const char* update_name(UpdateSchedule s) {
  return s == UpdateSchedule::AfterBackward ? "after-backward" : "during-backward";
}

std::string Plan::describe() const {
  if (optimizer_on_gpu)
    return fmt::format("everything on the GPU (weights {}, gradients {}, fp32 masters and AdamW state; GPU AdamW), "
                       "micro-batch {}",
                       dtype_name(weight_dtype), dtype_name(grad_dtype), micro_batch);
  int64_t resident = 0, offloaded = 0;
  for (auto u : units) resident += (u == UnitPlacement::ResidentParams);
  for (auto a : activations) offloaded += (a == ActivationPlacement::OffloadToHost);
  return fmt::format("{} slots, {} of {} units resident, {} of {} boundary activations on the host, micro-batch {}, "
                     "updates {}, weights {} / gradients {} on the GPU",
                     gpu_slots, resident, units.size(), offloaded, activations.size(), micro_batch,
                     update_name(update), dtype_name(weight_dtype), dtype_name(grad_dtype));
}

}  // namespace ferry
