// The choice that ends GEMM tuning (ops/cuda/cuda_gemm.cuh), as plain arithmetic so that it is
// tested without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace ferry {

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
