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
    case TraceTrack::BulkHostToDevice:
      return "bulk h2d";
    case TraceTrack::BulkDeviceToHost:
      return "bulk d2h";
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
    case StreamKind::BulkHostToDevice:
      return TraceTrack::BulkHostToDevice;
    case StreamKind::BulkDeviceToHost:
      return TraceTrack::BulkDeviceToHost;
  }
  return TraceTrack::Compute;
}

}  // namespace ferry
