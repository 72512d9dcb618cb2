// The unit of a timeline trace (device/trace/tracer.h): one piece of work on one track, with its begin
// and end on the host's steady clock (steady_seconds()), whichever clock it was measured with.
#pragma once

#include <cstdint>
#include <string>

#include "device/device.h"

namespace ferry {

// The rows of the timeline: the host thread that issues the work, the three streams, and the CPU
// updater's worker (a second worker would get a track of its own).
enum class TraceTrack : int {
  Host = 0,
  Compute = 1,
  HostToDevice = 2,
  DeviceToHost = 3,
  CpuUpdate = 4,
  BulkHostToDevice = 5,
  BulkDeviceToHost = 6,
};
constexpr int kTraceTrackCount = 7;

// "host", "compute", "h2d", "d2h", "cpu update", "bulk h2d", "bulk d2h".
const char* trace_track_name(TraceTrack track);
TraceTrack stream_track(StreamKind stream);

struct TraceSpan {
  TraceTrack track = TraceTrack::Host;
  std::string name;    // what ran: an op ("linear_forward"), a copy ("copy_to_device"), host work
  std::string scope;   // the engine's name for the work it belongs to ("layer.3 forward"), or empty
  double begin = 0.0;  // seconds, steady_seconds()
  double end = 0.0;
  int64_t bytes = -1;  // copies and fills; -1 otherwise
  std::string detail;  // an op's operands ("x (65536, 2048), w (8192, 2048)"), or empty
};

}  // namespace ferry
