// A timeline trace as Chrome's Trace Event Format (the JSON object form), which chrome://tracing
// and Perfetto (ui.perfetto.dev) load:
//
// * one process (the device), one thread per track, named and ordered by metadata events;
// * every span a complete event ("ph": "X") with "ts" and "dur" in microseconds from the first
//   traced step's begin, its scope and bytes in "args";
// * every traced step a span "step N" on the host track carrying the step's numbers
//   (device/trace/step_activity.h), which "otherData" repeats for scripts;
// * on the stream tracks, every run of consecutive spans with the same scope under a parent span
//   named by the scope (category "scope"), so the view reads unit by unit, op by op inside.
//
// The document is written as it is made, event by event, through `write` (a few hundred bytes at a
// time): a trace of several steps is tens of MB of JSON, which a document built in memory first
// would hold several times over (device/trace/span_store.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "device/trace/span_store.h"
#include "device/trace/step_activity.h"

namespace ferry {

// Host memory the writer holds while it writes `spans`: the order it writes them in.
size_t chrome_trace_working_bytes(size_t spans);

void write_chrome_trace(const SpanStore& spans, const std::vector<StepActivity>& steps,
                        const std::string& device_name, const std::function<void(std::string_view)>& write);

}  // namespace ferry
