#include "device/trace/step_activity.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace ferry {

namespace {

using Piece = std::pair<double, double>;

double fraction(double part, double whole) {
  return whole > 0.0 ? part / whole : 0.0;
}

}  // namespace

double covered_seconds(const SpanStore& spans, TraceTrack track, double begin, double end) {
  // Reserved for every span, what measure_step_working_bytes counts (a growing vector would hold
  // up to three times its pieces while it moves them).
  std::vector<Piece> pieces;
  pieces.reserve(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    const SpanView s = spans[i];
    if (s.track != track) continue;
    const double b = std::max(s.begin, begin), e = std::min(s.end, end);
    if (e > b) pieces.emplace_back(b, e);
  }
  std::sort(pieces.begin(), pieces.end());
  double covered = 0.0, reach = begin;
  for (const auto& [b, e] : pieces) {
    if (e <= reach) continue;
    covered += e - std::max(b, reach);
    reach = e;
  }
  return covered;
}

StepActivity measure_step(const SpanStore& spans, int64_t step, double begin, double end) {
  StepActivity a;
  a.step = step;
  a.begin = begin;
  a.end = end;
  const double wall = end - begin;
  a.compute_idle = 1.0 - fraction(covered_seconds(spans, TraceTrack::Compute, begin, end), wall);
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (size_t i = 0; i < spans.size(); ++i) {
    const SpanView s = spans[i];
    if (s.track != TraceTrack::Compute || s.end <= begin || s.begin >= end) continue;
    first = std::min(first, std::max(s.begin, begin));
    last = std::max(last, std::min(s.end, end));
  }
  if (last > first)
    a.compute_idle_inner =
        1.0 - fraction(covered_seconds(spans, TraceTrack::Compute, first, last), last - first);
  a.h2d_busy = fraction(covered_seconds(spans, TraceTrack::HostToDevice, begin, end), wall);
  a.d2h_busy = fraction(covered_seconds(spans, TraceTrack::DeviceToHost, begin, end), wall);
  a.cpu_update_busy = fraction(covered_seconds(spans, TraceTrack::CpuUpdate, begin, end), wall);
  return a;
}

size_t measure_step_working_bytes(size_t spans) {
  return spans * sizeof(Piece);
}

std::string describe(const StepActivity& a) {
  return fmt::format(
      "step {}: GPU idle {:.1f}% of {:.1f} ms ({:.1f}% between its first and last kernel); h2d busy {:.0f}%, "
      "d2h {:.0f}%, cpu update {:.0f}%",
      a.step, 100.0 * a.compute_idle, 1e3 * a.wall(), 100.0 * a.compute_idle_inner, 100.0 * a.h2d_busy,
      100.0 * a.d2h_busy, 100.0 * a.cpu_update_busy);
}

}  // namespace ferry
