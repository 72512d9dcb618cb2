#include "optim/device_adamw.h"

#include "optim/gpu_adamw.h"
#include "optim/queued_adamw.h"
#include "optim/tracing_adamw.h"

namespace ferry {

std::unique_ptr<DeviceAdamW> make_device_adamw(Device& device, StreamKind stream) {
  std::unique_ptr<DeviceAdamW> adamw;
  if (void* native = device.native_stream(stream))
    adamw = std::make_unique<GpuAdamW>(native);
  else
    adamw = std::make_unique<QueuedAdamW>(device, stream);
  if (Tracer* tracer = device.tracer())
    return std::make_unique<TracingAdamW>(std::move(adamw), *tracer, stream);
  return adamw;
}

}  // namespace ferry
