// The timeline trace of a training run (config `trace:` and `trace_steps:`, device/trace/tracer.h): the
// recorder and the decorated device the sliding engine runs on while a trace is asked for (the
// ops and device AdamW made for that device come wrapped in their tracing decorators), so that the
// executor only picks what to run on and brackets its steps.
#pragma once

#include <filesystem>
#include <vector>

#include "device/trace/tracer.h"
#include "device/trace/tracing_device.h"

namespace ferry {

class StepTrace {
 public:
  // Traces `device` (which must outlive this) during the optimizer steps `steps` into `path`, in
  // at most `host_bytes` of host memory.
  StepTrace(Device& device, const std::filesystem::path& path, std::vector<int64_t> steps, size_t host_bytes);

  // The device for the engine: the real one, timed while a traced step runs.
  Device& device() { return device_; }

  // Around one optimizer step: opens its window when it is to be traced; closes it (writing the
  // file and logging the step's idle numbers) once the step's loss has been read.
  void begin(int64_t step);
  void end();

 private:
  Tracer tracer_;
  TracingDevice device_;
};

}  // namespace ferry
