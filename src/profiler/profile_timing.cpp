#include "profiler/profile_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;

// Takes samples of every item in turn (a, b, c, a, b, c, ...) and keeps each item's median.
// `sample(i)` returns the seconds of one run of item i.
std::vector<double> medians_of_samples(size_t items, const std::function<double(size_t)>& sample,
                                       const TimingOptions& options) {
  FERRY_ASSERT(options.repeats >= 1);
  const double start = timing_now(options);
  std::vector<std::vector<double>> samples(items);
  for (int r = 0; r < options.repeats; ++r) {
    for (size_t i = 0; i < items; ++i) samples[i].push_back(sample(i));
    if (r + 1 >= 3 && timing_now(options) - start > options.max_seconds) break;
  }
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(std::move(s)));
  return out;
}

}  // namespace

double timing_now(const TimingOptions& options) {
  if (options.clock) return options.clock();
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

int warm_up(Device& device, const std::function<void()>& issue, const TimingOptions& options) {
  const int at_least = std::max(1, options.warmup_runs);
  const int at_most = std::max(at_least, options.max_warmup_runs);
  for (int runs = 1;; ++runs) {
    const int64_t before = options.tuning_calls ? options.tuning_calls() : 0;
    issue();
    device.synchronize_all();
    const bool tuned = !options.tuning_calls || options.tuning_calls() == before;
    if (runs >= at_most || (runs >= at_least && tuned)) return runs;
  }
}

int64_t runs_per_sample(double seconds_per_run, const TimingOptions& options) {
  // Capped so that work measured as ~0 (a clock tick) does not ask for millions of runs.
  constexpr int64_t kMaxRuns = 4096;
  if (options.min_sample_seconds <= 0.0) return 1;
  if (seconds_per_run <= 0.0) return kMaxRuns;
  const double runs = std::ceil(options.min_sample_seconds / seconds_per_run);
  return std::clamp<int64_t>(static_cast<int64_t>(runs), 1, kMaxRuns);
}

std::vector<double> time_each_on_device(Device& device, std::span<const std::function<void()>> issues,
                                        const TimingOptions& options) {
  std::vector<int64_t> runs;
  for (const auto& issue : issues) {
    warm_up(device, issue, options);
    const double start = timing_now(options);
    issue();
    device.synchronize_all();
    runs.push_back(runs_per_sample(timing_now(options) - start, options));
  }
  for (const double soak = timing_now(options); timing_now(options) - soak < options.soak_seconds;) {
    for (size_t i = 0; i < issues.size(); ++i) {
      for (int64_t r = 0; r < runs[i]; ++r) issues[i]();
    }
    device.synchronize_all();
  }
  return medians_of_samples(
      issues.size(),
      [&](size_t i) {
        const double t0 = timing_now(options);
        for (int64_t r = 0; r < runs[i]; ++r) issues[i]();
        device.synchronize_all();
        return (timing_now(options) - t0) / static_cast<double>(runs[i]);
      },
      options);
}

double time_on_device(Device& device, const std::function<void()>& issue, const TimingOptions& options) {
  return time_each_on_device(device, std::span<const std::function<void()>>(&issue, 1), options)[0];
}

double time_on_host(const std::function<void()>& run, const TimingOptions& options) {
  run();
  const double start = timing_now(options);
  run();
  const int64_t runs = runs_per_sample(timing_now(options) - start, options);
  return medians_of_samples(
      1,
      [&](size_t) {
        const double t0 = timing_now(options);
        for (int64_t i = 0; i < runs; ++i) run();
        return (timing_now(options) - t0) / static_cast<double>(runs);
      },
      options)[0];
}

double median(std::vector<double> values) {
  FERRY_ASSERT(!values.empty());
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

LinearTime fit_linear_time(std::span<const TimedTokens> points, const std::string& what) {
  FERRY_ASSERT(!points.empty(), "a fit needs a point");
  if (points.size() == 1) {
    // Long sequences, where only one micro-chunk fits: at that many tokens a call's fixed part
    // (launches, ~ms) is a small share of it, so the time is taken as proportional.
    const TimedTokens& p = points.front();
    FERRY_ASSERT(p.tokens > 0 && std::isfinite(p.seconds) && p.seconds >= 0.0);
    return {0.0, std::max(p.seconds, 1e-9) / static_cast<double>(p.tokens)};
  }
  double st = 0, sy = 0;
  for (const auto& p : points) {
    FERRY_ASSERT(p.tokens > 0 && std::isfinite(p.seconds) && p.seconds >= 0.0);
    st += static_cast<double>(p.tokens);
    sy += p.seconds;
  }
  const double n = static_cast<double>(points.size()), mean_t = st / n, mean_y = sy / n;
  double stt = 0, sty = 0, st2 = 0, sty0 = 0;
  for (const auto& p : points) {
    const double t = static_cast<double>(p.tokens);
    stt += (t - mean_t) * (t - mean_t);
    sty += (t - mean_t) * (p.seconds - mean_y);
    st2 += t * t;
    sty0 += t * p.seconds;
  }
  FERRY_ASSERT(stt > 0.0, "the points need two distinct token counts");
  LinearTime fit{mean_y - (sty / stt) * mean_t, sty / stt};
  if (fit.per_token_s > 0.0 && fit.fixed_s >= 0.0) return fit;
  if (fit.per_token_s > 0.0) {
    log_info("profile: {} measured a fixed part below zero ({:.3g} s); fitted through the origin", what,
             fit.fixed_s);
    return {0.0, sty0 / st2};
  }
  log_info(
      "profile: {} did not grow with the tokens at {}..{} tokens (launch-bound); modelled as proportional "
      "to the tokens",
      what, points.front().tokens, points.back().tokens);
  double rate = 0.0;
  for (const auto& p : points) rate += p.seconds / static_cast<double>(p.tokens);
  rate /= n;
  // A run that took no measurable time at all still costs something: one clock tick per run.
  return {0.0, std::max(rate, 1e-9 / static_cast<double>(points.back().tokens))};
}

}  // namespace ferry
