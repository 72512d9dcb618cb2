// The estimate of the time left: the plan's step time before a step, then the measured steps
// without the first one's one-time work.
#include <gtest/gtest.h>

#include "train/progress.h"
#include "train/run_summary.h"

namespace ferry {
namespace {

TEST(Progress, DurationsAreShortAndExact) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(2 * 86400 + 3 * 3600 + 59), "2d03h");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, PredictedThenMeasuredWithoutTheFirstStep) {
  RunProgress p(10, 0, 2.0);
  EXPECT_EQ(p.eta_seconds(), std::optional<double>(20.0));
  EXPECT_EQ(p.eta_text(), "ETA 20s predicted");
  p.step_done(9.0);  // the first step: one-time work
  EXPECT_EQ(p.eta_seconds(), std::optional<double>(81.0));
  p.step_done(3.0);
  p.step_done(5.0);
  EXPECT_EQ(p.measured_step_seconds(), std::optional<double>(4.0));
  EXPECT_EQ(p.eta_seconds(), std::optional<double>(28.0));
  EXPECT_EQ(p.eta_text(), "ETA 28s");
}

TEST(Progress, AResumedRunCountsFromItsCheckpointAndNoPredictionMeansNoEstimate) {
  RunProgress resumed(10, 8, 1.0);
  EXPECT_EQ(resumed.eta_seconds(), std::optional<double>(2.0));
  RunProgress cpu(10, 0, 0.0);
  EXPECT_FALSE(cpu.eta_seconds().has_value());
  EXPECT_EQ(cpu.eta_text(), "");
  cpu.step_done(1.5);
  EXPECT_EQ(cpu.eta_seconds(), std::optional<double>(13.5));
}

// Evaluations are in the time left: every eval_steps and after the last step, each predicted until
// one is measured; the one due after the step just done counts until it has run.
TEST(Progress, TheTimeLeftIncludesTheEvaluations) {
  RunProgress p(10, 0, 2.0, EvaluationPlan{true, 4, 3.0});
  EXPECT_EQ(p.evaluations_left(), 3);  // after steps 4, 8 and 10
  EXPECT_EQ(p.eta_seconds(), std::optional<double>(10 * 2.0 + 3 * 3.0));
  for (int s = 1; s <= 4; ++s) p.step_done(2.0);
  EXPECT_EQ(p.evaluations_left(), 3);  // step 4's has not run yet
  p.evaluation_done(5.0);
  EXPECT_EQ(p.evaluations_left(), 2);
  EXPECT_EQ(p.evaluation_seconds(), std::optional<double>(5.0));  // measured, instead of the prediction
  EXPECT_EQ(p.eta_seconds(), std::optional<double>(6 * 2.0 + 2 * 5.0));

  RunProgress every_step(3, 0, 1.0, EvaluationPlan{true, 1, 0.5});
  EXPECT_EQ(every_step.evaluations_left(), 3);
  RunProgress at_the_end(3, 0, 1.0, EvaluationPlan{true, 0, 0.5});
  EXPECT_EQ(at_the_end.evaluations_left(), 1);
  EXPECT_EQ(at_the_end.eta_seconds(), std::optional<double>(3.5));
  RunProgress none(3, 0, 1.0);
  EXPECT_EQ(none.evaluations_left(), 0);
  EXPECT_EQ(none.eta_seconds(), std::optional<double>(3.0));
  RunProgress resumed(10, 8, 1.0, EvaluationPlan{true, 4, 0.5});  // step 8's evaluation ran before
  EXPECT_EQ(resumed.evaluations_left(), 1);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

TEST(RunSummary, SaysTimeSpeedPlanLossMemoryAndWhere) {
  RunEnd e;
  e.runtime_seconds = 125;
  e.steps = 10;
  e.step_seconds = 100;
  e.tokens = 655360;
  e.predicted_step_seconds = 8.0;
  e.measured_step_seconds = 10.0;
  e.final_loss = 1.23456;
  e.best_eval_loss = 1.5;
  e.peak_device_bytes = size_t{3} << 30;
  e.peak_pinned_bytes = size_t{1} << 30;
  e.peak_host_bytes = size_t{5} << 30;
  e.model_dir = "/runs/out";
  EXPECT_EQ(describe_run_end(e),
            (std::vector<std::string>{"done: 10 steps in 2m05s (6554 tok/s over the steps)",
                                      "step time: 10 s measured, 8 s predicted by the plan (+25%)",
                                      "final loss: 1.2346", "best evaluation loss: 1.5000",
                                      "peak memory: GPU 3.00 GiB, pinned 1.00 GiB, host 5.00 GiB",
                                      "model: /runs/out"}));
  // The steps' CPU AdamW beside the profile's rates; well above its rate alone, the profile (this
  // machine's) was measured on a busy machine, and the run says so.
  RunEnd rates;
  rates.steps = 1;
  rates.step_seconds = 1;
  rates.tokens = 10;
  rates.cpu_adamw = CpuAdamWRates{5.8e9, 5.77e9, 4.1e9, true};
  const std::string rate_line =
      "CPU AdamW: 5.80 G params/s in the steps (the profile: 5.77 alone, 4.10 beside copies both ways)";
  EXPECT_EQ(describe_run_end(rates),
            (std::vector<std::string>{"done: 1 steps in 0s (10 tok/s over the steps)", rate_line}));
  rates.cpu_adamw = CpuAdamWRates{5.8e9, 4.21e9, 2.77e9, true};
  const std::vector<std::string> low = describe_run_end(rates);
  ASSERT_EQ(low.size(), 3u);
  EXPECT_NE(low[2].find("the profile's CPU AdamW rate is too low"), std::string::npos) << low[2];
  EXPECT_NE(low[2].find("ferry profile"), std::string::npos) << low[2];
  rates.cpu_adamw->profile_of_this_machine = false;
  EXPECT_EQ(describe_run_end(rates).size(), 2u) << "another machine's profile: its rates are that machine's";

  RunEnd cpu;
  cpu.steps = 1;
  cpu.step_seconds = 2;
  cpu.tokens = 100;
  cpu.measured_step_seconds = 2.0;
  EXPECT_EQ(describe_run_end(cpu), (std::vector<std::string>{"done: 1 steps in 0s (50 tok/s over the steps)",
                                                             "step time: 2 s measured"}));
}

}  // namespace
}  // namespace ferry
