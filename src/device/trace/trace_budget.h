// The host memory a trace may hold by default (config `trace_memory`): its spans, the device's
// stamps in flight and what writing its file takes (device/trace/tracer.h). The host plan counts it
// beside the engine when a trace is asked for. A traced step of an 8B at micro-batch 16 (two
// micro-batches of 32 layers, ~3,300 spans) holds ~2.8 MiB, each further one ~0.2 MiB more.
#pragma once

#include <cstddef>

namespace ferry {

inline constexpr size_t kTraceHostBytes = size_t{64} << 20;
// The least a trace is given: its file's write buffer (1 MiB) and a small step's spans.
inline constexpr size_t kMinTraceHostBytes = size_t{4} << 20;

}  // namespace ferry
