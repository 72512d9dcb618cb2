// The machine profile's timing arithmetic: the median, the batch size of a sample, and the fit of
// fixed + per-token seconds with its fallbacks for noisy points.
#include <atomic>
#include <functional>

#include "core/log.h"
#include "device/device.h"
#include "profiler/profile_timing.h"
#include "test_util.h"

namespace ferry {
namespace {

class QuietLog : public ::testing::Test {
 protected:
  QuietLog() : saved_(log_level()) { set_log_level(LogLevel::Off); }
  ~QuietLog() override { set_log_level(saved_); }
  LogLevel saved_;
};

using ProfileTiming = QuietLog;

TEST_F(ProfileTiming, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({7.0}), 7.0);
}

TEST_F(ProfileTiming, SampleLastsAtLeastTheMinimum) {
  TimingOptions o;
  o.min_sample_seconds = 0.02;
  EXPECT_EQ(runs_per_sample(0.05, o), 1);
  EXPECT_EQ(runs_per_sample(0.001, o), 20);
  EXPECT_EQ(runs_per_sample(0.0, o), 4096) << "capped";
}

TEST_F(ProfileTiming, FitRecoversALine) {
  const TimedTokens points[] = {
      {512, 1e-4 + 512 * 3e-7}, {1024, 1e-4 + 1024 * 3e-7}, {2048, 1e-4 + 2048 * 3e-7}};
  const LinearTime t = fit_linear_time(points, "test");
  EXPECT_NEAR(t.fixed_s, 1e-4, 1e-12);
  EXPECT_NEAR(t.per_token_s, 3e-7, 1e-15);
}

TEST_F(ProfileTiming, NegativeFixedPartIsRefittedThroughTheOrigin) {
  const TimedTokens points[] = {{100, 0.9e-3}, {200, 2.1e-3}};
  const LinearTime t = fit_linear_time(points, "test");
  EXPECT_EQ(t.fixed_s, 0.0);
  // Least squares through the origin: sum(t*y) / sum(t^2).
  EXPECT_NEAR(t.per_token_s, (100 * 0.9e-3 + 200 * 2.1e-3) / (100.0 * 100 + 200.0 * 200), 1e-15);
}

TEST_F(ProfileTiming, OnePointIsProportional) {
  // A long sequence where only one micro-chunk fits the device.
  const TimedTokens points[] = {{65536, 1.5}};
  const LinearTime t = fit_linear_time(points, "test");
  EXPECT_EQ(t.fixed_s, 0.0);
  EXPECT_DOUBLE_EQ(t.per_token_s, 1.5 / 65536);
}

TEST_F(ProfileTiming, TimeThatDoesNotGrowIsModelledAsProportional) {
  const TimedTokens points[] = {{100, 2e-5}, {200, 1.8e-5}, {400, 1.9e-5}};
  const LinearTime t = fit_linear_time(points, "test");
  EXPECT_EQ(t.fixed_s, 0.0);
  EXPECT_NEAR(t.per_token_s, (2e-5 / 100 + 1.8e-5 / 200 + 1.9e-5 / 400) / 3, 1e-15);
  EXPECT_GT(t.per_token_s, 0.0);
}

// A clock that only the timed work advances: each run adds the seconds it stands for. Runs on a
// device stream add them there, and the timing reads the clock after synchronizing, so what the
// tests below assert holds whatever the machine's load.
class WorkClock {
 public:
  void advance(double seconds) { seconds_.fetch_add(seconds); }
  double now() const { return seconds_.load(); }
  std::function<double()> reader() const {
    return [this] { return now(); };
  }

 private:
  std::atomic<double> seconds_{0.0};
};

TEST_F(ProfileTiming, HostTimingIsTheMedianRunTime) {
  WorkClock clock;
  TimingOptions o;
  o.repeats = 3;
  o.min_sample_seconds = 0.0;
  o.clock = clock.reader();
  int runs = 0;
  const double seconds = time_on_host(
      [&] {
        ++runs;
        clock.advance(runs == 4 ? 0.5 : 0.002);  // one disturbed sample
      },
      o);
  EXPECT_NEAR(seconds, 0.002, 1e-12);
  EXPECT_EQ(runs, 2 + 3) << "a warm-up, a sizing run, then one run per sample";
}

// Work that is slow for its first calls (the CUDA ops tune their GEMMs there) is timed at its
// steady speed once the warm-up covers those calls: 30 ms for the first 6 runs, then 1 ms.
TEST_F(ProfileTiming, DeviceTimingWarmsUpFirst) {
  auto device = make_sim_device({});
  WorkClock clock;
  TimingOptions o;
  o.repeats = 3;
  o.min_sample_seconds = 0.0;
  o.clock = clock.reader();
  int calls = 0;
  const std::function<void()> slow_start = [&] {
    const int call = ++calls;
    device->host_task(StreamKind::Compute, [&clock, call] { clock.advance(call <= 6 ? 0.030 : 0.001); });
  };
  o.warmup_runs = 6;
  EXPECT_NEAR(time_on_device(*device, slow_start, o), 0.001, 1e-12);
  EXPECT_EQ(calls, 6 + 1 + 3) << "the warm-up, a sizing run, then one run per sample";
  calls = 0;
  o.warmup_runs = 1;
  EXPECT_NEAR(time_on_device(*device, slow_start, o), 0.030, 1e-12) << "a short warm-up times the slow calls";
}

// Work on tuning ops warms up until a run makes no tuning call: here its first 4 runs tune (30 ms
// each), so 5 warm-up runs time it at its steady 1 ms, where warmup_runs alone (1) would not; the
// cap stops a warm-up whose tuning never ends.
TEST_F(ProfileTiming, DeviceTimingWarmsUpUntilARunTunesNothing) {
  auto device = make_sim_device({});
  WorkClock clock;
  TimingOptions o;
  o.repeats = 3;
  o.min_sample_seconds = 0.0;
  o.clock = clock.reader();
  o.warmup_runs = 1;
  o.max_warmup_runs = 31;
  int calls = 0;
  int64_t tuning = 0;
  o.tuning_calls = [&] { return tuning; };
  const std::function<void()> tuned_in_four = [&] {
    const int call = ++calls;
    if (call <= 4) tuning += 3;  // three products on trial in each of the first runs
    device->host_task(StreamKind::Compute, [&clock, call] { clock.advance(call <= 4 ? 0.030 : 0.001); });
  };
  EXPECT_EQ(warm_up(*device, tuned_in_four, o), 5) << "4 runs that tune, then one that does not";
  calls = 0;
  tuning = 0;
  EXPECT_NEAR(time_on_device(*device, tuned_in_four, o), 0.001, 1e-12);
  EXPECT_EQ(calls, 5 + 1 + 3) << "the warm-up, a sizing run, then one run per sample";

  o.max_warmup_runs = 3;
  const std::function<void()> always_tuning = [&] { ++tuning; };
  EXPECT_EQ(warm_up(*device, always_tuning, o), 3) << "capped";
  o.tuning_calls = nullptr;
  o.warmup_runs = 2;
  EXPECT_EQ(warm_up(*device, always_tuning, o), 2) << "without a tuning count: warmup_runs";
}

// A device that runs fast at first and slows under sustained load (a GPU boosting, then held to its
// power cap): 1 ms a call during its first 60 ms of work, 4 ms after. Training sees the slow
// speed; the soak makes the samples see it too.
TEST_F(ProfileTiming, DeviceTimingSoaksIntoTheSustainedSpeed) {
  auto device = make_sim_device({});
  WorkClock clock;
  TimingOptions o;
  o.repeats = 3;
  o.min_sample_seconds = 0.0;
  o.warmup_runs = 1;
  o.clock = clock.reader();
  double busy = 0.0;  // seconds of work so far (the stream runs one task at a time)
  const std::function<void()> capped = [&] {
    device->host_task(StreamKind::Compute, [&] {
      const double seconds = busy < 0.060 ? 0.001 : 0.004;
      busy += seconds;
      clock.advance(seconds);
    });
  };
  EXPECT_NEAR(time_on_device(*device, capped, o), 0.001, 1e-12) << "timed in its first bursts";
  device->synchronize_all();
  busy = 0.0;
  o.soak_seconds = 0.1;
  EXPECT_NEAR(time_on_device(*device, capped, o), 0.004, 1e-12) << "timed at the sustained speed";
}

}  // namespace
}  // namespace ferry
