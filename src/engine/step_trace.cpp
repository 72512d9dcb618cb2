#include "engine/step_trace.h"

#include "ops/device_ops.h"
#include "ops/tracing_ops.h"

namespace ferry {

StepTrace::StepTrace(Device& device, const std::filesystem::path& path, std::vector<int64_t> steps)
    : tracer_(device, path, std::move(steps)), device_(device, tracer_) {}

std::unique_ptr<Ops> StepTrace::make_ops() {
  // The device's own ops issue through the tracing device (QueuedOps' host tasks pass it untimed),
  // and are timed one by one here.
  return std::make_unique<TracingOps>(make_device_ops(device_), tracer_);
}

void StepTrace::begin(int64_t step) {
  if (tracer_.wants(step)) tracer_.begin_step(step);
}

void StepTrace::end() {
  if (tracer_.recording()) tracer_.end_step();
}

}  // namespace ferry
