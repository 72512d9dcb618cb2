// The choice that ends GEMM tuning (ops/gemm_tuning.h): the heuristic's first candidate is kept
// unless another's median is faster by the margin; medians ignore a disturbed sample; a candidate
// that never ran is never chosen. The environment's candidate count, FERRY_GEMM_CANDIDATES, takes
// 1 to 64 and refuses anything else with a message that says so; the debug log's line. The trials'
// bookkeeping (GemmTrials): rounds, best guess first; a candidate far slower than the fastest leaves
// after two trials, one slow call drops nothing, the first never leaves, a refused one has no
// times, and neither is chosen.
#include <gtest/gtest.h>

#include <functional>
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

// Runs a product's tuning as Gemm does when every call's time is filed before the next call:
// `time(c, k)` is candidate c's k-th time. Returns the candidates in the order they ran.
std::vector<size_t> run_trials(GemmTrials& trials, const std::function<float(size_t, int)>& time) {
  std::vector<size_t> order;
  std::vector<int> calls(trials.milliseconds().size(), 0);
  for (size_t c = trials.next(); c != GemmTrials::kNone; c = trials.next()) {
    order.push_back(c);
    trials.issued(c);
    trials.filed(c, time(c, calls[c]++));
  }
  return order;
}

TEST(GemmTrials, EveryCandidateRunsInRoundsBestGuessFirst) {
  GemmTrials trials(3, 2);
  const std::vector<size_t> order = run_trials(trials, [](size_t, int) { return 1.0f; });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(trials.complete());
  EXPECT_EQ(trials.trials_issued(), 6u);
  EXPECT_EQ(trials.choose(0.05f), 0u);
}

TEST(GemmTrials, ACandidateFarSlowerThanTheFastestLeavesAfterTwoTrials) {
  // Candidate 2 takes 1.5x the fastest time: it runs twice, then the others finish their five.
  GemmTrials trials(3, 5);
  const std::vector<size_t> order = run_trials(trials, [](size_t c, int) {
    return c == 2 ? 1.5f : c == 1 ? 0.9f : 1.0f;
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 0, 1}));
  EXPECT_TRUE(trials.dropped(2));
  EXPECT_FALSE(trials.dropped(1));
  EXPECT_TRUE(trials.complete());
  EXPECT_EQ(trials.choose(0.05f), 1u);
}

TEST(GemmTrials, OneSlowCallDropsNothing) {
  // Candidate 1's first call is 10x slow (its kernel loaded then), its second as fast as any.
  GemmTrials trials(2, 5);
  run_trials(trials, [](size_t c, int k) { return c == 1 && k == 0 ? 10.0f : 1.0f; });
  EXPECT_FALSE(trials.dropped(1));
  EXPECT_EQ(trials.milliseconds()[1].size(), 5u);
  // Within the drop ratio of the fastest: every trial runs.
  GemmTrials close(2, 5);
  run_trials(close, [](size_t c, int) { return c == 1 ? 1.15f : 1.0f; });
  EXPECT_FALSE(close.dropped(1));
  EXPECT_EQ(close.trials_issued(), 10u);
}

TEST(GemmTrials, TheHeuristicsFirstNeverLeaves) {
  GemmTrials trials(2, 3);
  run_trials(trials, [](size_t c, int) { return c == 0 ? 3.0f : 1.0f; });
  EXPECT_FALSE(trials.dropped(0));
  EXPECT_EQ(trials.milliseconds()[0].size(), 3u);
  EXPECT_EQ(trials.choose(0.05f), 1u);
}

TEST(GemmTrials, ADroppedCandidateIsNeverChosen) {
  // Candidate 1 left after two slow calls; times that come in later (calls already issued) do not
  // bring it back, however fast.
  GemmTrials trials(2, 3);
  trials.issued(0), trials.issued(1), trials.issued(0), trials.issued(1), trials.issued(0);
  trials.filed(0, 1.0f), trials.filed(1, 2.0f), trials.filed(0, 1.0f), trials.filed(1, 2.0f);
  EXPECT_TRUE(trials.dropped(1));
  trials.filed(1, 0.1f);
  trials.filed(0, 1.0f);
  EXPECT_TRUE(trials.dropped(1));
  EXPECT_EQ(trials.next(), GemmTrials::kNone);
  EXPECT_TRUE(trials.complete());
  EXPECT_EQ(trials.choose(0.05f), 0u);
}

TEST(GemmTrials, ARefusedCandidateLeavesWithoutTimes) {
  GemmTrials trials(3, 2);
  EXPECT_EQ(trials.next(), 0u);
  trials.issued(0);
  trials.filed(0, 1.0f);
  EXPECT_EQ(trials.next(), 1u);
  trials.refused(1);
  EXPECT_EQ(trials.next(), 2u);
  const std::vector<size_t> order = run_trials(trials, [](size_t, int) { return 0.5f; });
  EXPECT_EQ(order, (std::vector<size_t>{2, 0, 2}));
  EXPECT_TRUE(trials.milliseconds()[1].empty());
  EXPECT_EQ(trials.choose(0.05f), 2u);
}

TEST(GemmTrials, SlowCandidatesCostTwoTrialsEach) {
  // 24 candidates, 20 of them twice as slow as the rest: 4 x 5 + 20 x 2 trials instead of 120.
  GemmTrials trials(24, kGemmTuneSamples);
  run_trials(trials, [](size_t c, int) { return c % 6 == 0 ? 1.0f : 2.0f; });
  EXPECT_EQ(trials.trials_issued(), 4u * kGemmTuneSamples + 20u * 2u);
  EXPECT_TRUE(trials.complete());
}

TEST(GemmTuning, TheLogLineNamesTheChoiceAndEveryCandidatesMedian) {
  GemmTrials trials(4, 3);
  for (size_t c = 0; c < 4; ++c) trials.issued(c);
  trials.refused(2);
  const std::vector<std::vector<float>> times = {{0.5f, 0.4f, 0.6f}, {0.3f, 0.9f, 0.32f}, {}, {0.7f, 0.8f}};
  for (size_t k = 0; k < 3; ++k)
    for (size_t c = 0; c < 4; ++c)
      if (k < times[c].size()) trials.filed(c, times[c][k]);
  const std::string line = gemm_tuning_summary(
      {"algo 21 tile 18", "algo 66 tile 40", "algo 31 tile 5", "algo 6 tile 1"}, trials, 1);
  EXPECT_EQ(line,
            "chose [1], -36.0% against the first; candidates: [0] algo 21 tile 18: 500.0 us (3) | "
            "[1] algo 66 tile 40: 320.0 us (3) | [2] algo 31 tile 5: refused | [3] algo 6 tile 1: 800.0 us "
            "(2, dropped)");
  GemmTrials two(2, 1);
  two.filed(0, 1.0f), two.filed(1, 1.02f);
  EXPECT_EQ(gemm_tuning_summary({"a", "b"}, two, 0),
            "chose [0]; candidates: [0] a: 1000.0 us (1) | [1] b: 1020.0 us (1)");
}

}  // namespace
}  // namespace ferry
