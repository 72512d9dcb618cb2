#include "device/trace/trace_span.h"

namespace ferry {

const char* trace_track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::Host:
      return "host";
    case TraceTrack::Compute:
      return "compute";
    case TraceTrack::HostToDevice:
      return "h2d";
    case TraceTrack::DeviceToHost:
      return "d2h";
    case TraceTrack::CpuUpdate:
      return "cpu update";
  }
  return "?";
}

TraceTrack stream_track(StreamKind stream) {
  switch (stream) {
    case StreamKind::Compute:
      return TraceTrack::Compute;
    case StreamKind::HostToDevice:
      return TraceTrack::HostToDevice;
    case StreamKind::DeviceToHost:
      return TraceTrack::DeviceToHost;
  }
  return TraceTrack::Compute;
}

}  // namespace ferry
