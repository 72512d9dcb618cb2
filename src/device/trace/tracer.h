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
// Threads: begin_step, end_step, device work and scopes belong to the host thread that issues the
// device's work (checked); host spans may come from any thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device/device.h"
#include "device/trace/step_activity.h"
#include "device/trace/trace_span.h"

namespace ferry {

class Tracer {
 public:
  // Stamps are recorded on and taken from `device` (the undecorated one); the trace of `steps`
  // (1-based optimizer steps) goes to `path`.
  Tracer(Device& device, std::filesystem::path path, std::vector<int64_t> steps);
  // Warns when none of the steps ran (nothing was written).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool wants(int64_t step) const;
  void begin_step(int64_t step);
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

 private:
  template <typename Describe, typename Issue>
  void record_device_work(StreamKind stream, const char* name, int64_t bytes, Describe&& describe,
                          Issue&& issue) {
    if (!recording()) {
      issue();
      return;
    }
    const StampId begin = device_.record_stamp(stream);
    issue();
    add_device_span(stream, name, bytes, begin, device_.record_stamp(stream), describe());
  }
  void add_device_span(StreamKind stream, std::string name, int64_t bytes, StampId begin, StampId end,
                       std::string detail);

  static constexpr double kOpen = std::numeric_limits<double>::infinity();
  struct Window {
    int64_t step;
    double begin, end;  // end is kOpen while the window is
  };
  struct PendingSpan {
    TraceTrack track;
    std::string name, scope;
    int64_t bytes;
    StampId begin, end;
    std::string detail;
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
  std::atomic<bool> recording_{false};
  std::atomic<std::thread::id> host_thread_{};  // read by other threads' synchronize()
  std::vector<std::string> scopes_;             // host thread only

  mutable std::mutex mutex_;
  std::vector<Window> windows_;
  std::vector<PendingSpan> pending_;
  std::vector<TraceSpan> spans_;
  std::vector<StepActivity> activities_;
  std::unordered_map<uint64_t, OpenSpan> open_;
  uint64_t next_open_ = 1;
};

}  // namespace ferry
