#include "ops/device_ops.h"

#include "ops/queued_ops.h"
#include "ops/tracing_ops.h"

namespace ferry {

namespace {

std::unique_ptr<Ops> make_untraced_ops(Device& device) {
  if (void* stream = device.native_stream(StreamKind::Compute)) {
    // The ops' working memory comes from the device, inside its budget and its peak.
    WorkspaceAllocator allocator{
        [&device](size_t bytes, const char* what) { return device.allocate(bytes, what); },
        [&device](void* pointer) { device.release(pointer); }};
    return make_cuda_ops(stream, std::move(allocator));
  }
  return std::make_unique<QueuedOps>(device, make_cpu_ops(), StreamKind::Compute);
}

}  // namespace

std::unique_ptr<Ops> make_device_ops(Device& device) {
  std::unique_ptr<Ops> ops = make_untraced_ops(device);
  if (Tracer* tracer = device.tracer()) return std::make_unique<TracingOps>(std::move(ops), *tracer);
  return ops;
}

}  // namespace ferry
