#include "device/trace/tracer.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "device/trace/trace_json.h"
#include "io/atomic_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "trace";

// Host memory of one stamp in flight: the device's timing event (the driver's object) and its
// entry in the device's table. An estimate; the device keeps a step's stamps for the next.
constexpr size_t kStampBytes = 256;
// The file is written through a buffer of this size.
constexpr size_t kWriteBufferBytes = size_t{1} << 20;

}  // namespace

Tracer::Tracer(Device& device, std::filesystem::path path, std::vector<int64_t> steps, size_t host_bytes)
    : device_(device), path_(std::move(path)), trace_steps_(std::move(steps)), host_bytes_(host_bytes) {
  FERRY_CHECK(!path_.empty(), kWhere,
              "no file given for the trace; set `trace:` to a path such as trace.json");
  for (int64_t s : trace_steps_)
    FERRY_CHECK(s >= 1, kWhere, "trace_steps are optimizer steps, counted from 1; got {}", s);
}

Tracer::~Tracer() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (activities_.empty())
    log_warn(
        "[{}] none of the steps to trace ran, so {} was not written; set trace_steps to steps of this run",
        kWhere, path_.string());
}

bool Tracer::wants(int64_t step) const {
  return std::find(trace_steps_.begin(), trace_steps_.end(), step) != trace_steps_.end();
}

bool Tracer::begin_step(int64_t step) {
  FERRY_ASSERT(!recording(), "a traced step began inside another");
  host_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (largest_step_ > 0 && held_bytes_locked(largest_step_, largest_step_) > host_bytes_) {
      log_warn(
          "[{}] step {} is not traced: the trace holds {} of the {} the host plan gives it (trace_memory), "
          "and a step of {} spans would take it to {}; trace fewer steps (trace_steps) or give it more",
          kWhere, step, format_bytes(held_bytes_locked(0, 0)), format_bytes(host_bytes_), largest_step_,
          format_bytes(held_bytes_locked(largest_step_, largest_step_)));
      return false;
    }
    windows_.push_back({step, steady_seconds(), kOpen});
    step_first_span_ = spans_.size();
  }
  recording_.store(true, std::memory_order_release);
  return true;
}

StepActivity Tracer::end_step() {
  FERRY_ASSERT(recording() && on_host_thread(), "end_step without begin_step on this thread");
  FERRY_ASSERT(scopes_.empty(), "a trace scope is still open at the end of the step");
  recording_.store(false, std::memory_order_release);
  // The window closes at one instant for every thread: host spans still open are cut there, and
  // spans that close or open later see the window closed.
  std::deque<PendingSpan> pending;
  const size_t index = windows_.size() - 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Window& w = windows_[index];
    w.end = steady_seconds();
    for (auto& [id, open] : open_) {
      if (open.next_window > index) continue;
      emit_clipped(open.track, open.name, open.begin, w.end, w);
      open.next_window = index + 1;
    }
    pending.swap(pending_);
    peak_pending_ = std::max(peak_pending_, pending.size());
  }

  // Taking a stamp may wait for its stream, so the stamps are taken outside the lock.
  for (const PendingSpan& p : pending) {
    if (p.begin < 0 || p.end < 0) {
      // Held, but its work was never issued (the device failed meanwhile): an empty span.
      std::lock_guard<std::mutex> lock(mutex_);
      spans_.set_times(p.index, windows_[index].begin, windows_[index].begin);
      continue;
    }
    const double b = device_.take_stamp(p.begin);
    const double e = device_.take_stamp(p.end);
    std::lock_guard<std::mutex> lock(mutex_);
    spans_.set_times(p.index, b, e);
  }

  // With the window closed no other thread adds spans (a host span still open was cut at the
  // window's end above, and one closing later overlaps no open window), so the spans are read
  // outside the lock: a host span closing meanwhile does not wait for the file.
  StepActivity activity;
  size_t step_spans = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_spans = spans_.size() - step_first_span_;
    largest_step_ = std::max(largest_step_, step_spans);
    const Window& w = windows_[index];
    activity = measure_step(spans_, w.step, w.begin, w.end);
    activities_.push_back(activity);
    writing_ = true;
  }
  try {
    write_file();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    writing_ = false;
    throw;
  }
  size_t held = 0, dropped = 0, needed = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    writing_ = false;
    held = held_bytes_locked(0, 0);
    dropped = dropped_ - dropped_reported_;
    needed = held_bytes_locked(dropped, peak_pending_ + dropped);
    dropped_reported_ = dropped_;
  }
  log_info("{} (trace: {}, {} spans of this step, {} held of the trace's {})", describe(activity),
           path_.string(), step_spans, format_bytes(held), format_bytes(host_bytes_));
  if (dropped > 0)
    log_warn(
        "[{}] step {}: {} spans were not recorded: the {} of host memory the plan gives the trace "
        "(trace_memory) were full, so the step's numbers above miss them; all of them would have taken "
        "about {}: give the trace that much, or trace fewer steps (trace_steps)",
        kWhere, activity.step, dropped, format_bytes(host_bytes_), format_bytes(needed));
  return activity;
}

void Tracer::write_file() const {
  if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
  AtomicFile file(path_);
  std::string buffer;
  buffer.reserve(kWriteBufferBytes);
  write_chrome_trace(spans_, activities_, device_.name(), [&](std::string_view text) {
    if (buffer.size() + text.size() > kWriteBufferBytes) {
      file.write(buffer);
      buffer.clear();
    }
    if (text.size() > kWriteBufferBytes)
      file.write(text);
    else
      buffer.append(text);
  });
  file.write(buffer);
  file.commit();
}

size_t Tracer::held_bytes_locked(size_t spans, size_t pending) const {
  const size_t n = spans_.size() + spans;
  const size_t in_flight = pending_.size() + pending;
  const size_t store = spans_.bytes_with(spans);
  // The stamps' records and the device's stamps: the step's in flight, or the largest step's,
  // which the device keeps for reuse (and end_step holds while it takes them).
  const size_t stamped = std::max(peak_pending_, in_flight);
  const size_t working =
      std::max(measure_step_working_bytes(n), chrome_trace_working_bytes(n)) + kWriteBufferBytes;
  return store + stamped * (sizeof(PendingSpan) + 2 * kStampBytes) + working;
}

size_t Tracer::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_bytes_locked(0, 0);
}

size_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

size_t Tracer::hold_device_span(StreamKind stream, const char* name, int64_t bytes,
                                const std::string& detail) {
  FERRY_ASSERT(on_host_thread(), "device work traced from a thread other than the one issuing the step");
  const std::string_view scope = scopes_.empty() ? std::string_view() : std::string_view(scopes_.back());
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(!writing_, "device work traced while the trace is written");
  if (held_bytes_locked(1, 1) > host_bytes_) {
    ++dropped_;
    return kNotHeld;
  }
  // The times are the stamps', taken when the step ends.
  spans_.add(stream_track(stream), name, scope, 0.0, 0.0, bytes, detail);
  pending_.push_back({spans_.size() - 1, -1, -1});
  return pending_.size() - 1;
}

void Tracer::stamp_device_span(size_t pending, StampId begin, StampId end) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_[pending].begin = begin;
  pending_[pending].end = end;
}

uint64_t Tracer::open_host_span(TraceTrack track, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Read under the lock: a span that begins before a window's end is in open_ when end_step closes
  // the window (cut there), and one that comes after begins after the end; a begin read before the
  // lock could precede the end and reach open_ only after the closing, adding to the closed window
  // while its trace is written.
  const double begin = steady_seconds();
  size_t next = windows_.size();  // the first window that ends after the span begins
  while (next > 0 && windows_[next - 1].end > begin) --next;
  const uint64_t id = next_open_++;
  open_.emplace(id, OpenSpan{track, std::move(name), begin, next});
  return id;
}

void Tracer::close_host_span(uint64_t id) {
  const double end = steady_seconds();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = open_.find(id);
  FERRY_ASSERT(it != open_.end(), "a host span closed twice");
  const OpenSpan& open = it->second;
  for (size_t w = open.next_window; w < windows_.size(); ++w)
    emit_clipped(open.track, open.name, open.begin, end, windows_[w]);
  open_.erase(it);
}

void Tracer::emit_clipped(TraceTrack track, const std::string& name, double begin, double end,
                          const Window& w) {
  const double b = std::max(begin, w.begin), e = std::min(end, w.end);
  if (e <= b) return;
  FERRY_ASSERT(!writing_, "a span added to a closed window while its trace is written");
  if (held_bytes_locked(1, 0) > host_bytes_) {
    ++dropped_;
    return;
  }
  spans_.add(track, name, {}, b, e, -1, {});
}

void Tracer::push_scope(std::string name) {
  FERRY_ASSERT(on_host_thread(), "trace scopes belong to the thread issuing the step");
  scopes_.push_back(std::move(name));
}

void Tracer::pop_scope() {
  FERRY_ASSERT(!scopes_.empty());
  scopes_.pop_back();
}

std::vector<TraceSpan> Tracer::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_.expanded();
}

std::vector<StepActivity> Tracer::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return activities_;
}

}  // namespace ferry
