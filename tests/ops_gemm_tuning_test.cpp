// The choice that ends GEMM tuning (ops/gemm_tuning.h): the heuristic's first candidate is kept
// unless another's median is faster by the margin; medians ignore a disturbed sample; a candidate
// that never ran is never chosen.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ferry
