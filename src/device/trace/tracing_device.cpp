#include "device/trace/tracing_device.h"

#include "device/trace/trace_scope.h"

namespace ferry {

namespace {

int64_t signed_bytes(size_t bytes) {
  return static_cast<int64_t>(bytes);
}

}  // namespace

void TracingDevice::copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return inner_.copy_to_device(device_dst, host_src, bytes, stream);
  tracer_.device_work(stream, "copy_to_device", signed_bytes(bytes),
                      [&] { inner_.copy_to_device(device_dst, host_src, bytes, stream); });
}

void TracingDevice::copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return inner_.copy_to_host(host_dst, device_src, bytes, stream);
  tracer_.device_work(stream, "copy_to_host", signed_bytes(bytes),
                      [&] { inner_.copy_to_host(host_dst, device_src, bytes, stream); });
}

void TracingDevice::copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return inner_.copy_on_device(dst, src, bytes, stream);
  tracer_.device_work(stream, "copy_on_device", signed_bytes(bytes),
                      [&] { inner_.copy_on_device(dst, src, bytes, stream); });
}

void TracingDevice::fill_zero(void* device_dst, size_t bytes, StreamKind stream) {
  if (bytes == 0) return inner_.fill_zero(device_dst, bytes, stream);
  tracer_.device_work(stream, "fill_zero", signed_bytes(bytes),
                      [&] { inner_.fill_zero(device_dst, bytes, stream); });
}

// The host thread's waits are where a step stalls on the device: a span each. Other threads' waits
// (the CPU updater waiting for a gradient) show as the gaps of their own tracks.
void TracingDevice::synchronize(EventId event) {
  if (!tracer_.recording() || !tracer_.on_host_thread()) return inner_.synchronize(event);
  const HostSpan span(*this, TraceTrack::Host, "synchronize");
  inner_.synchronize(event);
}

void TracingDevice::synchronize_all() {
  if (!tracer_.recording() || !tracer_.on_host_thread()) return inner_.synchronize_all();
  const HostSpan span(*this, TraceTrack::Host, "synchronize_all");
  inner_.synchronize_all();
}

}  // namespace ferry
