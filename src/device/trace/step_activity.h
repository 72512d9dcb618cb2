// What a traced step's timeline says about overlap, as pure functions over its spans, so that the
// numbers are tested on synthetic spans and computed the same way from any trace.
//
// The window of a step is its wall time as the training loop sees it: from the host entering the
// step (before the step's first copy or kernel is issued) to the host holding the step's loss.
// GPU idle is the fraction of that window in which the compute stream runs nothing (no op, fill or
// kernel). The window deliberately includes the pipeline's fill (the first upload the first op
// waits for) and drain (the loss read-back): they are part of what a step costs, and a schedule
// that overlaps one step with the next (updates of step s under the forward of step s+1) is
// exactly what removes them. The idle time between the first and the last compute span is
// reported beside it, to tell stalls inside the step from its edges. The training loop's own work
// between two steps (building the batch, logging) lies outside every window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/trace/span_store.h"

namespace ferry {

struct StepActivity {
  int64_t step = 0;
  double begin = 0.0, end = 0.0;    // the window, steady_seconds()
  double compute_idle = 0.0;        // fraction of the window with nothing on the compute stream
  double compute_idle_inner = 0.0;  // the same between the first and last compute span (0 if none)
  double h2d_busy = 0.0;            // fractions of the window with a copy running
  double d2h_busy = 0.0;
  double cpu_update_busy = 0.0;  // fraction of the window the CPU updater works
  double wall() const { return end - begin; }
};

// Seconds of [begin, end] covered by at least one span of `track` (overlapping spans count once).
double covered_seconds(const SpanStore& spans, TraceTrack track, double begin, double end);

// The step's numbers from every span of its window [begin, end] (spans outside are clipped away).
StepActivity measure_step(const SpanStore& spans, int64_t step, double begin, double end);

// The most host memory measure_step (and covered_seconds) allocate for a store of `spans` spans:
// one track's pieces, where every span could be on that track (device/trace/tracer.h counts it).
size_t measure_step_working_bytes(size_t spans);

// "step 3: GPU idle 2.1% of 812.0 ms (0.4% between its first and last kernel); h2d busy 40%, d2h 12%,
// cpu update 70%"
std::string describe(const StepActivity& activity);

}  // namespace ferry
