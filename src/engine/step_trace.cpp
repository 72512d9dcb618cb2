#include "engine/step_trace.h"

namespace ferry {

StepTrace::StepTrace(Device& device, const std::filesystem::path& path, std::vector<int64_t> steps,
                     size_t host_bytes)
    : tracer_(device, path, std::move(steps), host_bytes), device_(device, tracer_) {}

void StepTrace::begin(int64_t step) {
  if (tracer_.wants(step)) tracer_.begin_step(step);
}

void StepTrace::end() {
  if (tracer_.recording()) tracer_.end_step();
}

}  // namespace ferry
