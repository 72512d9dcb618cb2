#include "device/trace/trace_json.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

namespace ferry {

namespace {

constexpr int kPid = 1;

int track_tid(TraceTrack track) {
  return static_cast<int>(track) + 1;
}

nlohmann::json activity_json(const StepActivity& a, double origin) {
  return {{"step", a.step},
          {"begin_us", (a.begin - origin) * 1e6},
          {"end_us", (a.end - origin) * 1e6},
          {"wall_ms", a.wall() * 1e3},
          {"gpu_idle_percent", 100.0 * a.compute_idle},
          {"gpu_idle_between_first_and_last_kernel_percent", 100.0 * a.compute_idle_inner},
          {"h2d_busy_percent", 100.0 * a.h2d_busy},
          {"d2h_busy_percent", 100.0 * a.d2h_busy},
          {"cpu_update_busy_percent", 100.0 * a.cpu_update_busy}};
}

// A complete event; "ts" and "dur" come from the same converted end points, so spans that touch
// on the clock still touch in the file.
nlohmann::json complete_event(std::string_view name, const char* category, TraceTrack track, double begin,
                              double end, double origin) {
  const double ts = (begin - origin) * 1e6, te = (end - origin) * 1e6;
  return {{"name", name}, {"cat", category}, {"ph", "X"}, {"pid", kPid}, {"tid", track_tid(track)},
          {"ts", ts},     {"dur", te - ts}};
}

bool on_stream(TraceTrack track) {
  return track == TraceTrack::Compute || track == TraceTrack::HostToDevice ||
         track == TraceTrack::DeviceToHost || track == TraceTrack::BulkHostToDevice ||
         track == TraceTrack::BulkDeviceToHost;
}

// The "traceEvents" array's elements, comma-separated as they come.
class EventWriter {
 public:
  explicit EventWriter(const std::function<void(std::string_view)>& write) : write_(write) {}
  void operator()(const nlohmann::json& event) {
    write_(first_ ? "\n" : ",\n");
    first_ = false;
    write_(event.dump());
  }

 private:
  const std::function<void(std::string_view)>& write_;
  bool first_ = true;
};

}  // namespace

size_t chrome_trace_working_bytes(size_t spans) {
  return spans * sizeof(uint32_t);
}

void write_chrome_trace(const SpanStore& spans, const std::vector<StepActivity>& steps,
                        const std::string& device_name, const std::function<void(std::string_view)>& write) {
  double origin = std::numeric_limits<double>::infinity();
  for (const StepActivity& a : steps) origin = std::min(origin, a.begin);
  for (size_t i = 0; i < spans.size(); ++i) origin = std::min(origin, spans[i].begin);
  if (steps.empty() && spans.empty()) origin = 0.0;

  write("{\"traceEvents\": [");
  EventWriter event(write);
  event({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", "ferry " + device_name}}}});
  for (int t = 0; t < kTraceTrackCount; ++t) {
    const TraceTrack track = static_cast<TraceTrack>(t);
    event({{"name", "thread_name"},
           {"ph", "M"},
           {"pid", kPid},
           {"tid", track_tid(track)},
           {"args", {{"name", trace_track_name(track)}}}});
    event({{"name", "thread_sort_index"},
           {"ph", "M"},
           {"pid", kPid},
           {"tid", track_tid(track)},
           {"args", {{"sort_index", t}}}});
  }

  for (const StepActivity& a : steps) {
    nlohmann::json e =
        complete_event("step " + std::to_string(a.step), "step", TraceTrack::Host, a.begin, a.end, origin);
    e["args"] = activity_json(a, origin);
    event(e);
  }

  // Parents are written before their children: viewers nest complete events of one thread by
  // containment and, where two begin together, read them in file order.
  std::vector<uint32_t> ordered(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) ordered[i] = static_cast<uint32_t>(i);
  std::stable_sort(ordered.begin(), ordered.end(), [&spans](uint32_t a, uint32_t b) {
    const SpanView x = spans[a], y = spans[b];
    return x.track != y.track ? x.track < y.track : x.begin < y.begin;
  });
  for (size_t i = 0; i < ordered.size();) {
    size_t j = i + 1;
    const SpanView first = spans[ordered[i]];
    if (on_stream(first.track) && !first.scope.empty()) {
      double end = first.end;
      for (; j < ordered.size(); ++j) {
        const SpanView next = spans[ordered[j]];
        if (next.track != first.track || next.scope != first.scope) break;
        end = std::max(end, next.end);
      }
      event(complete_event(first.scope, "scope", first.track, first.begin, end, origin));
    }
    for (size_t k = i; k < j; ++k) {
      const SpanView s = spans[ordered[k]];
      nlohmann::json e =
          complete_event(s.name, on_stream(s.track) ? "device" : "host", s.track, s.begin, s.end, origin);
      nlohmann::json args = nlohmann::json::object();
      if (!s.scope.empty()) args["scope"] = s.scope;
      if (s.bytes >= 0) args["bytes"] = s.bytes;
      if (!s.detail.empty()) args["detail"] = s.detail;
      if (!args.empty()) e["args"] = std::move(args);
      event(e);
    }
    i = j;
  }

  nlohmann::json step_numbers = nlohmann::json::array();
  for (const StepActivity& a : steps) step_numbers.push_back(activity_json(a, origin));
  const nlohmann::json other = {
      {"device", device_name},
      {"clock", "microseconds from the first traced step's begin (host steady clock)"},
      {"gpu_idle",
       "fraction of the step's wall time (host enters the step .. host holds its loss) "
       "with nothing on the compute stream"},
      {"steps", std::move(step_numbers)}};
  write("\n], \"displayTimeUnit\": \"ms\", \"otherData\": ");
  write(other.dump());
  write("}\n");
}

}  // namespace ferry
