// Room for what a run saves, checked before it trains: what each save weighs, a model that cannot
// fit refused, a peak that may not fit warned about; and a run into a disk too small stops before
// its first step.
#include <gtest/gtest.h>

#include "file_size_limit.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/output_space.h"
#include "train/trainer.h"

namespace ferry {
namespace {

using test::contains;

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(OutputSpaceTest, WhatARunWrites) {
  // 8B parameters in bf16 with the exact state: a 16 GB model, a 112 GB checkpoint.
  const int64_t n = 8'000'000'000;
  const OutputWrites w = output_writes(n, DType::BF16, OptimizerStateFormat::Fp32, 1000, 100, 2, true);
  EXPECT_EQ(w.model, 16'000'000'000u);
  EXPECT_EQ(w.checkpoint, 16'000'000'000u + 96'000'000'000u);
  EXPECT_EQ(w.checkpoints, 3);  // two kept, and the newest before the oldest goes
  EXPECT_EQ(w.best, w.model);
  EXPECT_EQ(output_writes(n, DType::BF16, OptimizerStateFormat::Fp32, 1000, 400, 0, false).checkpoints, 2);
  const OutputWrites none = output_writes(n, DType::F32, OptimizerStateFormat::Fp32, 1000, 0, 2, false);
  EXPECT_EQ(none.model, 32'000'000'000u);
  EXPECT_EQ(none.checkpoints, 0);
  EXPECT_EQ(none.checkpoint, 0u);
  EXPECT_EQ(none.best, 0u);
  // A lean state weighs less than the exact one.
  EXPECT_LT(output_writes(n, DType::BF16, OptimizerStateFormat::Bf16SrQ8, 1000, 100, 2, false).checkpoint,
            w.checkpoint / 2);
}

TEST(OutputSpaceTest, AModelThatCannotFitIsRefusedAPeakIsWarnedAbout) {
  OutputWrites w;
  w.model = 16 * kGiB;
  w.checkpoint = 112 * kGiB;
  w.checkpoints = 3;
  w.best = 16 * kGiB;
  std::string warning;
  const std::string refused = output_space_problem(10 * kGiB, 0, w, &warning);
  EXPECT_TRUE(contains(refused, "16.00 GiB") && contains(refused, "10.00 GiB")) << refused;
  // Weights of an earlier save that the final save replaces count as room.
  EXPECT_EQ(output_space_problem(10 * kGiB, 8 * kGiB, w, &warning), "");
  EXPECT_TRUE(contains(warning, "save_total_limit")) << warning;
  EXPECT_EQ(output_space_problem(300 * kGiB, 0, w, &warning), "");
  EXPECT_TRUE(contains(warning, "384.00 GiB")) << warning;  // 3 x 112 + 2 x 16 + 16
  EXPECT_EQ(output_space_problem(400 * kGiB, 0, w, &warning), "");
  EXPECT_EQ(warning, "");
}

class OutputSpaceRunTest : public test::TinyRun {};

TEST_F(OutputSpaceRunTest, ARunWhoseModelCannotBeSavedStopsBeforeItTrains) {
  // The tiny model's float32 weights (~0.5 MB) do not fit a disk reported 64 KB free.
  TrainHooks hooks;
  hooks.output_free_bytes = 64 * 1024;
  const std::string message = test::error_of([&] { run_training(config("out"), hooks); });
  EXPECT_TRUE(contains(message, "the trained model needs")) << message;
  EXPECT_FALSE(std::filesystem::exists(scratch_ / "out" / "metrics.jsonl")) << "no step ran";
}

}  // namespace
}  // namespace ferry
