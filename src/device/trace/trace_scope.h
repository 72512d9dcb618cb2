// What engine code says to the timeline trace (device/trace/tracer.h), through the Device it already
// holds: names for the device work it issues, and its own host work. (The device work itself is
// timed by the decorators: TracingDevice, TracingOps, TracingAdamW.) Each is a no-op costing a null
// test when the device carries no tracer (no `trace:`).
#pragma once

#include <string>
#include <string_view>

#include "device/device.h"
#include "device/trace/trace_span.h"

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

}  // namespace ferry
