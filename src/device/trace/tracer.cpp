#include "device/trace/tracer.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "device/trace/trace_json.h"
#include "io/atomic_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "trace";

}  // namespace

Tracer::Tracer(Device& device, std::filesystem::path path, std::vector<int64_t> steps)
    : device_(device), path_(std::move(path)), trace_steps_(std::move(steps)) {
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

void Tracer::begin_step(int64_t step) {
  FERRY_ASSERT(!recording(), "a traced step began inside another");
  host_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    windows_.push_back({step, steady_seconds(), kOpen});
  }
  recording_.store(true, std::memory_order_release);
}

StepActivity Tracer::end_step() {
  FERRY_ASSERT(recording() && on_host_thread(), "end_step without begin_step on this thread");
  FERRY_ASSERT(scopes_.empty(), "a trace scope is still open at the end of the step");
  recording_.store(false, std::memory_order_release);
  // The window closes at one instant for every thread: host spans still open are cut there, and
  // spans that close or open later see the window closed.
  std::vector<PendingSpan> pending;
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
  }

  // Taking a stamp may wait for its stream, so the stamps are taken outside the lock.
  std::vector<TraceSpan> taken;
  taken.reserve(pending.size());
  for (PendingSpan& p : pending) {
    const double b = device_.take_stamp(p.begin);
    const double e = device_.take_stamp(p.end);
    taken.push_back({p.track, std::move(p.name), std::move(p.scope), b, e, p.bytes, std::move(p.detail)});
  }

  StepActivity activity;
  nlohmann::json trace;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Window& w = windows_[index];
    spans_.insert(spans_.end(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
    activity = measure_step(spans_, w.step, w.begin, w.end);
    activities_.push_back(activity);
    trace = chrome_trace(spans_, activities_, device_.name());
  }
  if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
  write_file_atomic(path_, trace.dump());
  log_info("{} (trace: {})", describe(activity), path_.string());
  return activity;
}

void Tracer::add_device_span(StreamKind stream, std::string name, int64_t bytes, StampId begin, StampId end,
                             std::string detail) {
  FERRY_ASSERT(on_host_thread(), "device work traced from a thread other than the one issuing the step");
  PendingSpan p{stream_track(stream),
                std::move(name),
                scopes_.empty() ? std::string() : scopes_.back(),
                bytes,
                begin,
                end,
                std::move(detail)};
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(std::move(p));
}

uint64_t Tracer::open_host_span(TraceTrack track, std::string name) {
  const double begin = steady_seconds();
  std::lock_guard<std::mutex> lock(mutex_);
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
  if (e > b) spans_.push_back({track, name, std::string(), b, e, -1, {}});
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
  return spans_;
}

std::vector<StepActivity> Tracer::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return activities_;
}

}  // namespace ferry
