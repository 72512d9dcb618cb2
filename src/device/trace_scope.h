// What engine code says to the timeline trace (device/tracer.h), through the Device it already
// holds. Each is a no-op costing a null test when the device carries no tracer (no `trace:`), and
// a boolean test more when it does but the step is not traced.
#pragma once

#include <string>
#include <string_view>

#include "device/device.h"
#include "device/trace_span.h"

namespace ferry {

// Names the device work the calling (issuing) thread issues while it lives — "layer.3 forward" —
// and shows as a span of the host track (how long the host took to issue it, waits included).
// The name is `what` and `detail` joined by a space, built only while a step is traced.
class TraceScope {
 public:
  TraceScope(Device& device, std::string_view what, std::string_view detail = {});
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_ = nullptr;  // set while this scope is pushed
  uint64_t span_ = 0;
};

// Host work on a track (the CPU updater's AdamW of a unit): kept where it overlaps a traced step.
class HostSpan {
 public:
  HostSpan(Device& device, TraceTrack track, std::string_view what, std::string_view detail = {});
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  Tracer* tracer_ = nullptr;
  uint64_t span_ = 0;
};

// Device work issued to a stream by other means than the traced Device and Ops calls (the GPU
// AdamW kernels), bracketed by two stamps while a step is traced.
class DeviceSpan {
 public:
  DeviceSpan(Device& device, StreamKind stream, std::string_view what);
  ~DeviceSpan();
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

 private:
  Device& device_;
  Tracer* tracer_ = nullptr;
  StreamKind stream_;
  std::string name_;
  StampId begin_ = 0;
};

}  // namespace ferry
