// Learning-rate schedules against transformers' values at known points.
#include <cmath>
#include <numbers>

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
