// The choice that ends GEMM tuning (ops/cuda/cuda_gemm.cuh), the debug log's line about it, and the
// environment's candidate count, as plain arithmetic so that they are tested without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "ops/cuda_ops_sizes.h"

namespace ferry {

// What the tuning settings add to CudaOps::kernels(), which a machine profile records (a cached
// profile measured with other settings is measured again: the GEMMs' speed depends on them):
// nothing for the default, so that profiles measured with it stay valid.
inline std::string gemm_tuning_label(bool tuning, int candidates) {
  if (!tuning) return ", GEMMs untuned";
  if (candidates == kGemmTuneAlgos) return "";
  return ", GEMMs tuned among " + std::to_string(candidates);
}

// FERRY_GEMM_CANDIDATES's value (nullptr or empty: unset, kGemmTuneAlgos): a whole number from 1 to
// 64; anything else is a user's mistake, refused with the range and the default.
inline int gemm_candidates_from_env(const char* value) {
  if (value == nullptr || *value == '\0') return kGemmTuneAlgos;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*end != '\0' || n < 1 || n > 64)
    raise("cuda", std::string("FERRY_GEMM_CANDIDATES=") + value +
                      ": expected a whole number from 1 to 64 (how many of cuBLASLt's algorithms GEMM tuning "
                      "times per product); unset it for the default, " +
                      std::to_string(kGemmTuneAlgos));
  return static_cast<int>(n);
}

// Per candidate, the median of its timed calls (the upper one of an even count); infinity for a
// candidate without samples.
inline std::vector<float> gemm_candidate_medians(std::vector<std::vector<float>> milliseconds) {
  std::vector<float> medians;
  for (auto& samples : milliseconds) {
    std::sort(samples.begin(), samples.end());
    medians.push_back(samples.empty() ? std::numeric_limits<float>::infinity() : samples[samples.size() / 2]);
  }
  return medians;
}

// `milliseconds`: per candidate, best guess (cuBLASLt's heuristic's first) first, the times of its
// timed calls. Keeps the candidate with the lowest median time when that median is at least
// `margin` (a fraction) below the first candidate's; else the first, so that two runs choose alike
// where candidates are close. A candidate without samples (one cuBLASLt refused to run) never
// wins; the first always has samples.
inline size_t choose_gemm_candidate(const std::vector<std::vector<float>>& milliseconds, float margin) {
  const std::vector<float> medians = gemm_candidate_medians(milliseconds);
  if (medians.empty()) return 0;
  size_t best = 0;
  for (size_t i = 1; i < medians.size(); ++i)
    if (medians[i] < medians[best]) best = i;
  return medians[best] < (1.0f - margin) * medians[0] ? best : 0;
}

// The debug log's line for a problem whose tuning ended: the candidate chosen, then every
// candidate's name (`names[i]`, cuBLASLt's configuration), the median of its trials in
// microseconds and how many there were, or that cuBLASLt refused to run it. It is what sets a
// step's choices beside a benchmark's for the same product.
inline std::string gemm_tuning_summary(const std::vector<std::string>& names,
                                       const std::vector<std::vector<float>>& milliseconds, size_t chosen) {
  FERRY_ASSERT(names.size() == milliseconds.size() && chosen < names.size(),
               "one name and one list of times per candidate, and the chosen one among them");
  const std::vector<float> medians = gemm_candidate_medians(milliseconds);
  char buffer[64];
  std::string line = "chose [" + std::to_string(chosen) + "]";
  if (chosen != 0 && std::isfinite(medians[chosen])) {
    std::snprintf(buffer, sizeof buffer, ", %+.1f%% against the first",
                  100.0 * (medians[chosen] / medians[0] - 1.0));
    line += buffer;
  }
  line += "; candidates:";
  for (size_t i = 0; i < names.size(); ++i) {
    line += (i == 0 ? " [" : " | [") + std::to_string(i) + "] " + names[i] + ": ";
    if (milliseconds[i].empty()) {
      line += "refused";
      continue;
    }
    std::snprintf(buffer, sizeof buffer, "%.1f us (%zu)", 1000.0 * medians[i], milliseconds[i].size());
    line += buffer;
  }
  return line;
}

}  // namespace ferry
