#include "ops/device_ops.h"

#include "ops/queued_ops.h"

namespace ferry {

std::unique_ptr<Ops> make_device_ops(Device& device) {
  if (void* stream = device.native_stream(StreamKind::Compute)) return make_cuda_ops(stream);
  return std::make_unique<QueuedOps>(device, make_cpu_ops(), StreamKind::Compute);
}

}  // namespace ferry
