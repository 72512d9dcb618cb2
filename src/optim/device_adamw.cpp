#include "optim/device_adamw.h"

#include "optim/gpu_adamw.h"
#include "optim/queued_adamw.h"

namespace ferry {

std::unique_ptr<DeviceAdamW> make_device_adamw(Device& device, StreamKind stream) {
  if (void* native = device.native_stream(stream)) return std::make_unique<GpuAdamW>(native);
  return std::make_unique<QueuedAdamW>(device, stream);
}

}  // namespace ferry
