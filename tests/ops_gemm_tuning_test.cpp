// GEMM tuning's rounds and choice (ops/gemm_tuning.h): the heuristic's first candidate is kept
// unless another's median is faster by the margin; medians ignore a disturbed sample; a candidate
// that never ran is never chosen; the screening sends the first and the fastest others to the
// final round, ranked by their fastest sample.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda_ops_sizes.h"
#include "ops/gemm_tuning.h"

namespace ferry {
namespace {

TEST(GemmTuning, KeepsTheFirstWhenItIsFastest) {
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {1.2f, 1.1f, 1.3f}, {2.0f, 2.0f, 2.0f}}, 0.05f), 0u);
}

TEST(GemmTuning, TakesAnotherOnlyWhenItIsFasterByTheMargin) {
  // 10% faster: taken.
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {0.95f, 0.95f, 0.95f}, {0.9f, 0.9f, 0.9f}}, 0.05f),
            2u);
  // 3% faster: within the margin, the first stays.
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {0.97f, 0.97f, 0.97f}}, 0.05f), 0u);
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {0.97f, 0.97f, 0.97f}}, 0.0f), 1u);
}

TEST(GemmTuning, MediansIgnoreADisturbedSample) {
  // Candidate 1 had one slow call (a clock change, another stream's copy); its median is 0.8.
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {0.8f, 9.0f, 0.8f}}, 0.05f), 1u);
  // Candidate 1 had one fast outlier; its median is 1.2.
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {1.2f, 0.1f, 1.2f}}, 0.05f), 0u);
}

TEST(GemmTuning, ACandidateThatNeverRanIsNeverChosen) {
  EXPECT_EQ(choose_gemm_candidate({{1.0f, 1.0f, 1.0f}, {}, {1.1f}}, 0.05f), 0u);
  EXPECT_EQ(choose_gemm_candidate({{1.0f}, {}, {0.5f}}, 0.05f), 2u);
  EXPECT_EQ(choose_gemm_candidate({{1.0f}}, kGemmTuneMargin), 0u);
}

TEST(GemmTuning, TheFinalRoundTakesTheFirstAndTheFastestOthers) {
  // Ranked by each candidate's fastest sample: 3 (0.7), 4 (0.8), 1 (0.9); 2 (1.5) and 5 (2.0) stay out.
  const std::vector<std::vector<float>> screening{{1.0f, 1.0f}, {0.9f, 1.4f}, {1.5f, 1.5f},
                                                  {3.0f, 0.7f}, {0.8f, 0.8f}, {2.0f, 2.0f}};
  EXPECT_EQ(gemm_finalists(screening, 4), (std::vector<size_t>{0, 3, 4, 1}));
  // The first goes on even when it is the slowest; fewer finalists where fewer were asked.
  EXPECT_EQ(gemm_finalists({{5.0f, 5.0f}, {1.0f, 1.0f}, {2.0f, 2.0f}}, 2), (std::vector<size_t>{0, 1}));
}

TEST(GemmTuning, TheFinalRoundLeavesOutCandidatesThatNeverRanAndKeepsTheOrderOnTies) {
  EXPECT_EQ(gemm_finalists({{1.0f}, {}, {0.5f}, {}, {0.5f}}, 4), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(gemm_finalists({{1.0f}, {}, {}}, 4), (std::vector<size_t>{0}));
}

TEST(GemmTuning, CallsOfBothRounds) {
  EXPECT_EQ(gemm_tuning_calls(1), 0u);
  // Up to kGemmOneRoundCandidates candidates (the default's 6): one round of every candidate.
  EXPECT_EQ(gemm_tuning_calls(kGemmTuneAlgos), static_cast<size_t>(kGemmTuneAlgos) * kGemmTuneSamples);
  EXPECT_EQ(gemm_tuning_calls(kGemmOneRoundCandidates), kGemmOneRoundCandidates * kGemmTuneSamples);
  EXPECT_EQ(gemm_tuning_calls(24), 24 * kGemmScreenSamples + kGemmFinalists * kGemmTuneSamples);
}

}  // namespace
}  // namespace ferry
