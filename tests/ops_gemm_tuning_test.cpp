// The choice that ends GEMM tuning (ops/gemm_tuning.h): the heuristic's first candidate is kept
// unless another's median is faster by the margin; medians ignore a disturbed sample; a candidate
// that never ran is never chosen. The environment's candidate count, FERRY_GEMM_CANDIDATES, takes
// 1 to 64 and refuses anything else with a message that says so; the debug log's line.
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

TEST(GemmTuning, TheEnvironmentSetsTheCandidateCount) {
  EXPECT_EQ(gemm_candidates_from_env(nullptr), kGemmTuneAlgos);
  EXPECT_EQ(gemm_candidates_from_env(""), kGemmTuneAlgos);
  EXPECT_EQ(gemm_candidates_from_env("1"), 1);
  EXPECT_EQ(gemm_candidates_from_env("24"), 24);
  EXPECT_EQ(gemm_candidates_from_env("64"), 64);
}

TEST(GemmTuning, TheEnvironmentsBadCandidateCountsAreRefusedWithTheRange) {
  for (const char* bad : {"0", "65", "-3", "24x", "six", "6 "}) {
    try {
      gemm_candidates_from_env(bad);
      ADD_FAILURE() << "FERRY_GEMM_CANDIDATES=" << bad << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("FERRY_GEMM_CANDIDATES=") + bad + ":"), std::string::npos) << what;
      EXPECT_NE(what.find("from 1 to 64"), std::string::npos) << what;
      EXPECT_NE(what.find("the default, " + std::to_string(kGemmTuneAlgos)), std::string::npos) << what;
    }
  }
}

TEST(GemmTuning, OnlyTheDefaultSettingsLeaveTheKernelsNameAlone) {
  // The name is what a cached machine profile is checked against: a profile measured with other
  // settings must not be taken for this run's (and one measured with the default stays valid).
  EXPECT_EQ(gemm_tuning_label(true, kGemmTuneAlgos), "");
  EXPECT_EQ(gemm_tuning_label(true, 6), ", GEMMs tuned among 6");
  EXPECT_EQ(gemm_tuning_label(false, kGemmTuneAlgos), ", GEMMs untuned");
  EXPECT_EQ(gemm_tuning_label(false, 6), ", GEMMs untuned");
}

TEST(GemmTuning, TheLogLineNamesTheChoiceAndEveryCandidatesMedian) {
  const std::string line = gemm_tuning_summary({"algo 21 tile 18", "algo 66 tile 40", "algo 31 tile 5"},
                                               {{0.5f, 0.4f, 0.6f}, {0.3f, 0.9f, 0.32f}, {}}, 1);
  EXPECT_EQ(line,
            "chose [1], -36.0% against the first; candidates: [0] algo 21 tile 18: 500.0 us (3) | "
            "[1] algo 66 tile 40: 320.0 us (3) | [2] algo 31 tile 5: refused");
  EXPECT_EQ(gemm_tuning_summary({"a", "b"}, {{1.0f}, {1.02f}}, 0),
            "chose [0]; candidates: [0] a: 1000.0 us (1) | [1] b: 1020.0 us (1)");
}

}  // namespace
}  // namespace ferry
