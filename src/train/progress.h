// Progress a person can plan around: how far the run is, how long it has run, and when it will end.
//
// The estimate of the time left comes from the plan's predicted step time until a step has been
// measured, then from the measured steps: their mean, without the run's first step once there are
// others (the first pays one-time work: first touches, GEMM heuristics, a profile). Evaluations
// (eval_steps, and one at the end) are part of the time left: each predicted by the planner
// (planner/eval_cost.h) until one has been measured, then their measured mean. Pure arithmetic
// over the numbers given, so that tests give them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ferry {

// "42s", "3m05s", "1h02m", "2d03h": short enough for a step line, precise where it matters.
std::string format_duration(double seconds);

// The evaluations of a run, as train/run_evaluation.h schedules them: after every step divisible
// by every_steps (0: none on the way) and after the last step.
struct EvaluationPlan {
  bool enabled = false;
  int64_t every_steps = 0;
  double predicted_seconds = 0.0;  // one evaluation of the whole set; 0: no prediction
};

class RunProgress {
 public:
  // Steps total_steps; the run starts after step first_step (a resume); predicted_step_seconds 0:
  // no prediction (the CPU trainer).
  RunProgress(int64_t total_steps, int64_t first_step, double predicted_step_seconds,
              EvaluationPlan evaluation = {});

  // A step of `seconds` wall time has finished.
  void step_done(double seconds);
  // The evaluation after the step last done took `seconds`.
  void evaluation_done(double seconds);

  // Evaluations still to run: after the steps not done yet, and after the last step done when it
  // is due one that has not run.
  int64_t evaluations_left() const;
  // The time one evaluation takes in the estimate: the measured mean, else the prediction.
  std::optional<double> evaluation_seconds() const;

  int64_t steps_measured() const { return measured_; }
  // The step time the estimate uses (see above); nullopt with neither a prediction nor a step.
  std::optional<double> step_seconds() const;
  // Mean measured step time without the first step (when there are others); nullopt before one.
  std::optional<double> measured_step_seconds() const;
  std::optional<double> eta_seconds() const;
  // "ETA 3m05s" (or "ETA 3m05s predicted" before the first step); empty without an estimate.
  std::string eta_text() const;

 private:
  int64_t total_steps_;
  int64_t done_;
  double predicted_;
  int64_t measured_ = 0;
  double first_seconds_ = 0.0;
  double later_seconds_ = 0.0;  // the measured steps after the run's first
  EvaluationPlan evaluation_;
  int64_t evaluated_step_ = -1;  // the step after which the last evaluation ran
  int64_t evaluations_measured_ = 0;
  double evaluation_seconds_ = 0.0;  // their sum
};

}  // namespace ferry
