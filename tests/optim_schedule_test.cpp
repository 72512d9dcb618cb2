// Learning-rate schedules against transformers' values at known points.
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

namespace ferry {
namespace {

constexpr double kLr = 2e-5;

TEST(LrSchedule, CosineWithWarmupAtKnownPoints) {
  // warmup 10, total 100, as get_cosine_schedule_with_warmup(opt, 10, 100).
  auto lr = [](int64_t s) { return lr_at(LrSchedule::Cosine, kLr, s, 10, 100); };
  EXPECT_EQ(lr(0), 0.0);
  EXPECT_DOUBLE_EQ(lr(5), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(lr(9), 0.9 * kLr);
  EXPECT_DOUBLE_EQ(lr(10), kLr);
  EXPECT_NEAR(lr(55), 0.5 * kLr, 1e-15);
  EXPECT_NEAR(lr(100), 0.0, 1e-20);
  // A quarter of the decay: 0.5 * (1 + cos(pi/4)).
  EXPECT_NEAR(lr(32) / kLr, 0.5 * (1.0 + std::cos(std::numbers::pi * 22.0 / 90.0)), 1e-15);
  // transformers does not clamp past the end: the cosine rises again.
  EXPECT_GT(lr(120), 0.0);
}

TEST(LrSchedule, LinearWithWarmupAtKnownPoints) {
  auto lr = [](int64_t s) { return lr_at(LrSchedule::Linear, kLr, s, 10, 100); };
  EXPECT_EQ(lr(0), 0.0);
  EXPECT_DOUBLE_EQ(lr(5), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(lr(10), kLr);
  EXPECT_DOUBLE_EQ(lr(55), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(lr(91), 0.1 * kLr);
  EXPECT_EQ(lr(100), 0.0);
  EXPECT_EQ(lr(150), 0.0);  // clamped at 0
}

TEST(LrSchedule, ConstantWithWarmup) {
  EXPECT_EQ(lr_at(LrSchedule::Constant, kLr, 0, 4, 100), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Constant, kLr, 1, 4, 100), 0.25 * kLr);
  EXPECT_EQ(lr_at(LrSchedule::Constant, kLr, 4, 4, 100), kLr);
  EXPECT_EQ(lr_at(LrSchedule::Constant, kLr, 1000, 4, 100), kLr);
}

TEST(LrSchedule, NoWarmupStartsAtThePeak) {
  EXPECT_EQ(lr_at(LrSchedule::Cosine, kLr, 0, 0, 100), kLr);
  EXPECT_EQ(lr_at(LrSchedule::Linear, kLr, 0, 0, 100), kLr);
  EXPECT_EQ(lr_at(LrSchedule::Constant, kLr, 0, 0, 100), kLr);
  // total_steps == warmup_steps: the decay span is max(1, 0) = 1, as in transformers.
  EXPECT_EQ(lr_at(LrSchedule::Linear, kLr, 10, 10, 10), 0.0);
}

TEST(LrSchedule, CosineMinLrRatio) {
  // get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate=0.1): factor * 0.9 + 0.1.
  const double r = 0.1;
  EXPECT_EQ(lr_at(LrSchedule::Cosine, kLr, 0, 10, 100, r), 0.0);  // warmup is unchanged
  EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Cosine, kLr, 10, 10, 100, r), kLr);
  EXPECT_NEAR(lr_at(LrSchedule::Cosine, kLr, 55, 10, 100, r), kLr * (0.1 + 0.9 * 0.5), 1e-15);
  EXPECT_NEAR(lr_at(LrSchedule::Cosine, kLr, 100, 10, 100, r), kLr * 0.1, 1e-15);
  // The ratio does not touch the other schedules.
  EXPECT_EQ(lr_at(LrSchedule::Linear, kLr, 100, 10, 100, r), 0.0);
}

TEST(LrSchedule, EqualsTransformersBitForBit) {
  // LambdaLR's lr with base 2e-5 from transformers 5.17.0 (get_cosine_schedule_with_warmup(10, 100),
  // get_linear_schedule_with_warmup(10, 100), get_constant_schedule_with_warmup(7),
  // get_cosine_with_min_lr_schedule_with_warmup(10, 100, min_lr_rate=0.1), cosine(3, 33)), read after
  // `step` scheduler steps; all 121 steps 0..120 agreed when generated, these are a sample.
  struct Case {
    LrSchedule schedule;
    int64_t warmup, total;
    double min_ratio;
    std::vector<double> expected;  // at kSteps
  };
  const std::vector<int64_t> kSteps = {0, 3, 9, 10, 11, 37, 55, 77, 99, 100, 101, 120};
  const std::vector<Case> cases = {
      {LrSchedule::Cosine,
       10,
       100,
       0.0,
       {0.0, 6e-06, 1.8e-05, 2e-05, 1.999390827019096e-05, 1.5877852522924733e-05, 1e-05,
        3.0534162954100264e-06, 6.091729809042379e-09, 0.0, 6.091729809042379e-09, 2.3395555688102202e-06}},
      {LrSchedule::Linear,
       10,
       100,
       0.0,
       {0.0, 6e-06, 1.8e-05, 2e-05, 1.977777777777778e-05, 1.4e-05, 1e-05, 5.1111111111111115e-06,
        2.2222222222222224e-07, 0.0, 0.0, 0.0}},
      {LrSchedule::Constant,
       7,
       100,
       0.0,
       {0.0, 8.571428571428571e-06, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05, 2e-05}},
      {LrSchedule::Cosine,
       10,
       100,
       0.1,
       {0.0, 6e-06, 1.8e-05, 2e-05, 1.9994517443171863e-05, 1.629006727063226e-05, 1.1000000000000001e-05,
        4.748074665869024e-06, 2.005482556828138e-06, 2.0000000000000003e-06, 2.005482556828138e-06,
        4.105600011929198e-06}},
      {LrSchedule::Cosine,
       3,
       33,
       0.0,
       {0.0, 2e-05, 1.8090169943749477e-05, 1.7431448254773943e-05, 1.6691306063588583e-05,
        8.645454235739892e-07, 1.6691306063588587e-05, 1.1045284632676535e-05, 1.9098300562505232e-06,
        2.5685517452260587e-06, 3.3086939364114113e-06, 1.9510565162951534e-05}},
  };
  for (const Case& c : cases)
    for (size_t i = 0; i < kSteps.size(); ++i)
      EXPECT_EQ(lr_at(c.schedule, 2e-5, kSteps[i], c.warmup, c.total, c.min_ratio), c.expected[i])
          << lr_schedule_name(c.schedule) << " warmup " << c.warmup << " total " << c.total << " min_ratio "
          << c.min_ratio << " step " << kSteps[i];
}

TEST(LrSchedule, ParsesNamesAndListsChoices) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LrSchedule::Cosine);
  EXPECT_EQ(parse_lr_schedule("linear"), LrSchedule::Linear);
  EXPECT_EQ(parse_lr_schedule("constant"), LrSchedule::Constant);
  for (auto s : {LrSchedule::Cosine, LrSchedule::Linear, LrSchedule::Constant})
    EXPECT_EQ(parse_lr_schedule(lr_schedule_name(s)), s);
  try {
    parse_lr_schedule("cosine_with_restarts");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "[optim] unknown lr_scheduler 'cosine_with_restarts'; choose one of: cosine, linear, constant");
  }
}

TEST(LrSchedule, RejectsBadArguments) {
  EXPECT_THROW(lr_at(LrSchedule::Cosine, kLr, -1, 10, 100), Error);
  EXPECT_THROW(lr_at(LrSchedule::Cosine, kLr, 0, -1, 100), Error);
  EXPECT_THROW(lr_at(LrSchedule::Cosine, kLr, 0, 10, -5), Error);
  EXPECT_THROW(lr_at(LrSchedule::Cosine, kLr, 0, 10, 100, 1.5), Error);
}

}  // namespace
}  // namespace ferry
