// The timeline trace of chosen training steps: what ran on each stream, on the host thread that
// issues the work and on the CPU updater, when — written as Chrome trace JSON (device/trace/trace_json.h)
// and summed up per step as GPU idle and copy/CPU busy fractions (device/trace/step_activity.h).
//
// * A traced step has a window, opened by begin_step() when the host enters the step and closed by
//   end_step() once it holds the step's loss. Only while it is open do the decorators that issue
//   work (TracingDevice, TracingOps, TracingAdamW) bracket each copy, fill and op with two stamps
//   (Device::record_stamp), named by the op and by the innermost TraceScope the engine opened.
//   Outside the windows they issue work exactly as without a trace; without `trace:` they are not
//   there at all, so an untraced run pays nothing.
// * Host work is timed with the steady clock (HostSpan, TraceScope). A host span may straddle a
//   window's edge (the CPU AdamW of step s runs under the forward of step s+1): it is kept clipped
//   to each window it overlaps; one still running when a window closes is cut at its end then.
// * Device work issued in a window may run past its end (the device-side AdamW a step issues after
//   reading its loss): its spans are kept whole, and count toward any traced window they overlap.
// * end_step() takes the window's stamps (waiting for work still running: only the traced step
//   pays that), measures the step, logs the numbers, and rewrites the trace file atomically with
//   every window so far.
//
// * What the trace holds in host memory stays within what it is given (config `trace_memory`,
//   device/trace/trace_budget.h), which the host plan counts beside the engine when a trace is
//   asked for: its spans (device/trace/span_store.h), the device's stamps of the step in flight,
//   and what writing the file takes. A step that would not fit is not traced, and spans past the
//   limit inside a step are dropped, each with a warning that says how much the step needed.
//
// Threads: begin_step, end_step, device work and scopes belong to the host thread that issues the
// device's work (checked); host spans may come from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "device/trace/span_store.h"
#include "device/trace/step_activity.h"
#include "device/trace/trace_budget.h"
#include "device/trace/trace_span.h"

namespace ferry {

class Tracer {
 public:
  // Stamps are recorded on and taken from `device` (the undecorated one); the trace of `steps`
  // (1-based optimizer steps) goes to `path`, holding at most `host_bytes` of host memory.
  Tracer(Device& device, std::filesystem::path path, std::vector<int64_t> steps,
         size_t host_bytes = kTraceHostBytes);
  // Warns when none of the steps ran (nothing was written).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool wants(int64_t step) const;
  // Opens the step's window; returns false, with a warning, where a step as large as the largest
  // traced so far would not fit in what is left of the trace's host memory.
  bool begin_step(int64_t step);
  StepActivity end_step();
  bool recording() const { return recording_.load(std::memory_order_acquire); }

  // Issues device work on `stream`; while recording, between two stamps, as a span named `name`.
  template <typename Issue>
  void device_work(StreamKind stream, const char* name, int64_t bytes, Issue&& issue) {
    record_device_work(
        stream, name, bytes, [] { return std::string(); }, issue);
  }

  // The same, with `describe()` as the span's detail (what the op ran on); called only while recording,
  // so that an untraced step builds no strings.
  template <typename Describe, typename Issue>
  void device_work_described(StreamKind stream, const char* name, Describe&& describe, Issue&& issue) {
    record_device_work(stream, name, -1, describe, issue);
  }

  // Host work on `track` from now until close_host_span(id); any thread.
  uint64_t open_host_span(TraceTrack track, std::string name);
  void close_host_span(uint64_t id);

  // The name given to device work the host thread issues until pop_scope() (recording only).
  void push_scope(std::string name);
  void pop_scope();
  bool on_host_thread() const {
    return std::this_thread::get_id() == host_thread_.load(std::memory_order_relaxed);
  }

  // What was recorded so far (tests).
  std::vector<TraceSpan> spans() const;
  std::vector<StepActivity> steps() const;
  // Host memory the trace holds now, by its count (see above), and the spans it dropped.
  size_t held_bytes() const;
  size_t dropped() const;

 private:
  template <typename Describe, typename Issue>
  void record_device_work(StreamKind stream, const char* name, int64_t bytes, Describe&& describe,
                          Issue&& issue) {
    const size_t held = recording() ? hold_device_span(stream, name, bytes, describe()) : kNotHeld;
    if (held == kNotHeld) {
      issue();
      return;
    }
    const StampId begin = device_.record_stamp(stream);
    try {
      issue();
    } catch (...) {
      stamp_device_span(held, begin, device_.record_stamp(stream));
      throw;
    }
    stamp_device_span(held, begin, device_.record_stamp(stream));
  }
  // Adds the span where it fits (checked and added under one lock, so that host spans added
  // meanwhile cannot take its room) and returns its place among the step's pending spans, for
  // stamp_device_span to give it its stamps; else counts it as dropped and returns kNotHeld.
  static constexpr size_t kNotHeld = std::numeric_limits<size_t>::max();
  size_t hold_device_span(StreamKind stream, const char* name, int64_t bytes, const std::string& detail);
  void stamp_device_span(size_t pending, StampId begin, StampId end);
  // Rewrites the file with every window so far, through a buffer of its own (end_step, with
  // writing_ set: the spans are read outside the lock).
  void write_file() const;
  // Bytes held by the count above, with `spans` more spans in the store and `pending` more
  // device spans in flight. Caller holds mutex_.
  size_t held_bytes_locked(size_t spans, size_t pending) const;

  static constexpr double kOpen = std::numeric_limits<double>::infinity();
  struct Window {
    int64_t step;
    double begin, end;  // end is kOpen while the window is
  };
  // A device span in the store whose times are its stamps', taken when the step ends.
  struct PendingSpan {
    size_t index;
    StampId begin, end;
  };
  struct OpenSpan {
    TraceTrack track;
    std::string name;
    double begin;
    size_t next_window;  // windows before this one hold the span already, or end before it begins
  };
  // Adds [begin, end] clipped to window w, if they overlap. Caller holds mutex_.
  void emit_clipped(TraceTrack track, const std::string& name, double begin, double end, const Window& w);

  Device& device_;
  const std::filesystem::path path_;
  const std::vector<int64_t> trace_steps_;
  const size_t host_bytes_;
  std::atomic<bool> recording_{false};
  std::atomic<std::thread::id> host_thread_{};  // read by other threads' synchronize()
  std::vector<std::string> scopes_;             // host thread only

  mutable std::mutex mutex_;
  std::vector<Window> windows_;
  std::deque<PendingSpan> pending_;
  size_t peak_pending_ = 0;  // the device keeps the stamps of the largest step for reuse
  size_t largest_step_ = 0;  // spans of the largest traced step
  size_t step_first_span_ = 0;
  size_t dropped_ = 0;  // spans dropped for room, this run
  size_t dropped_reported_ = 0;
  bool writing_ = false;  // end_step reads the spans outside the lock while it writes the file
  SpanStore spans_;
  std::vector<StepActivity> activities_;
  std::unordered_map<uint64_t, OpenSpan> open_;
  uint64_t next_open_ = 1;
};

}  // namespace ferry
