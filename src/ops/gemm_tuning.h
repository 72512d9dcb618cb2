// GEMM tuning's schedule and choices (ops/cuda/cuda_gemm.cuh), as plain arithmetic so that they
// are tested without a GPU.
//
// Up to kGemmOneRoundCandidates candidates, one round: each timed kGemmTuneSamples times, in
// turn, and the medians choose. With more, two: each is first timed kGemmScreenSamples times
// (screening); the heuristic's first and the kGemmFinalists - 1 others with the fastest screening
// sample then go on to the final round, kGemmTuneSamples calls each, whose medians choose.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/cuda_ops_sizes.h"

namespace ferry {

// The calls a problem's tuning times with `candidates` candidates (both rounds).
constexpr size_t gemm_tuning_calls(size_t candidates) {
  return candidates <= 1 ? 0
         : candidates <= kGemmOneRoundCandidates
             ? candidates * kGemmTuneSamples
             : candidates * kGemmScreenSamples + kGemmFinalists * kGemmTuneSamples;
}

// The final round's candidates from the screening's samples (per candidate, in the heuristic's
// order): the first (the heuristic's best guess, which the choice measures the others against),
// then the `count` - 1 others whose fastest sample is lowest (a candidate's first call can carry a
// one-time cost, such as loading its kernel), the earlier on ties. A candidate without samples (one
// cuBLASLt refused to run) does not go on.
inline std::vector<size_t> gemm_finalists(const std::vector<std::vector<float>>& milliseconds, size_t count) {
  std::vector<size_t> others;
  std::vector<float> fastest(milliseconds.size(), std::numeric_limits<float>::infinity());
  for (size_t i = 1; i < milliseconds.size(); ++i) {
    if (milliseconds[i].empty()) continue;
    fastest[i] = *std::min_element(milliseconds[i].begin(), milliseconds[i].end());
    others.push_back(i);
  }
  std::stable_sort(others.begin(), others.end(), [&](size_t a, size_t b) { return fastest[a] < fastest[b]; });
  std::vector<size_t> finalists{0};
  for (size_t i = 0; i < others.size() && finalists.size() < count; ++i) finalists.push_back(others[i]);
  return finalists;
}

// `milliseconds`: per candidate, best guess (cuBLASLt's heuristic's first) first, the times of its
// timed calls. Keeps the candidate with the lowest median time when that median is at least
// `margin` (a fraction) below the first candidate's; else the first, so that two runs choose alike
// where candidates are close. A candidate without samples (one cuBLASLt refused to run) never
// wins; the first always has samples.
inline size_t choose_gemm_candidate(std::vector<std::vector<float>> milliseconds, float margin) {
  std::vector<float> medians;
  for (auto& samples : milliseconds) {
    std::sort(samples.begin(), samples.end());
    medians.push_back(samples.empty() ? std::numeric_limits<float>::infinity() : samples[samples.size() / 2]);
  }
  if (medians.empty()) return 0;
  size_t best = 0;
  for (size_t i = 1; i < medians.size(); ++i)
    if (medians[i] < medians[best]) best = i;
  return medians[best] < (1.0f - margin) * medians[0] ? best : 0;
}

}  // namespace ferry
