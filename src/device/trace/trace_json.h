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
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device/trace/step_activity.h"
#include "device/trace/trace_span.h"

namespace ferry {

nlohmann::json chrome_trace(const std::vector<TraceSpan>& spans, const std::vector<StepActivity>& steps,
                            const std::string& device_name);

}  // namespace ferry
