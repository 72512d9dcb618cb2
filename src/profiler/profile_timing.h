// Timing for the machine profile (profiler/machine_profiler.h).
//
// The Device interface has no event timestamps, so work is timed from the host: a batch of runs is
// issued, the device drained with synchronize_all(), and a steady clock read around both. A batch
// long enough (TimingOptions::min_sample_seconds) makes the issue and drain overheads small beside
// the work; the median of several such samples discards a sample disturbed by something else.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "device/device.h"
#include "planner/profile.h"

namespace ferry {

struct TimingOptions {
  int repeats = 5;                   // samples per measurement; the median is kept
  int warmup_runs = 1;               // untimed runs first, at least
  double min_sample_seconds = 0.02;  // each sample runs the work enough times to last at least this
  // A measurement stops taking samples (keeping at least 3) once it has run this long, so that a
  // slow backend (the CPU reference on the simulated device) is measured in seconds.
  double max_seconds = 2.0;
  // Before the samples, the items run in turn for this long without a pause. A power-capped GPU
  // boosts its clocks after every idle gap and slows to the cap under sustained load, as training
  // keeps it: the H200 ran 1980 MHz in the profile's first bursts and 1400-1550 MHz at its 700 W
  // cap, and a 3B layer timed in bursts came out ~5% faster than in training steps.
  double soak_seconds = 0.0;
  // The clock the samples, the soak and max_seconds read, in seconds: the steady clock when empty.
  // A test gives a clock that its work advances, so that what it asserts about the times does not
  // depend on how busy the machine is.
  std::function<double()> clock;
  // The ops' count of calls made while a GEMM was being tuned (Ops::tuning_calls), when the work
  // runs on tuning ops: the warm-up goes on past warmup_runs until a run adds none, up to
  // max_warmup_runs (Ops::calls_to_steady_speed: a problem called once a run needs that many).
  // A layer in tiles calls each problem once per tile, so it is tuned in as many times fewer runs.
  std::function<int64_t()> tuning_calls;
  int max_warmup_runs = 1;
};

// Seconds on options.clock, or on the steady clock.
double timing_now(const TimingOptions& options);

// The untimed warm-up runs of `issue` (options.warmup_runs, then on while a run makes GEMM tuning
// calls, up to options.max_warmup_runs), each followed by synchronize_all. Returns how many ran.
int warm_up(Device& device, const std::function<void()>& issue, const TimingOptions& options);

// Seconds of one run of `issue`, which queues work on the device and returns: untimed warm-up runs
// (first-use allocations, plan caches, GEMM tuning), one run to size the batch, then the median
// over samples of (batch of runs + synchronize_all) / batch.
double time_on_device(Device& device, const std::function<void()>& issue, const TimingOptions& options);

// The same for several pieces of work compared with each other (a layer's forward and backward):
// their samples are taken in turn, so that a slow phase of the machine (another process, a clock
// change) falls on all of them alike and their ratios hold. Returns one time per item.
std::vector<double> time_each_on_device(Device& device, std::span<const std::function<void()>> issues,
                                        const TimingOptions& options);

// The same for work that runs on the calling thread (the CPU AdamW).
double time_on_host(const std::function<void()>& run, const TimingOptions& options);

// How many runs make one sample last min_sample_seconds, given one run's seconds.
int64_t runs_per_sample(double seconds_per_run, const TimingOptions& options);

double median(std::vector<double> values);

struct TimedTokens {
  int64_t tokens = 0;
  double seconds = 0.0;
};

// Least-squares fit of seconds = fixed_s + per_token_s * tokens over points at two or more
// distinct token counts. Noise can push the fit out of the physical range; then, with a log line
// naming `what`: a negative fixed part is refitted as a line through the origin, and a time that
// does not grow with the tokens at all (work dominated by launch overhead) is modelled as
// proportional to the tokens at the measured mean rate, so that per_token_s is always > 0.
LinearTime fit_linear_time(std::span<const TimedTokens> points, const std::string& what);

}  // namespace ferry
