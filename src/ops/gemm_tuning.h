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

// The trials of one product's candidates (ops/cuda/cuda_gemm.cuh): which candidate the next call
// runs, the times filed, when the tuning is over and what it chose. The candidates take their
// trials in rounds, each round every candidate still in once, best guess first, until each has
// `samples`. A candidate leaves (runs no more trials) once two of its times are filed and even the
// faster of them is kGemmTuneDropRatio times the fastest time of any candidate or more: to be
// chosen it would need a median below that candidate's, whose own times would then lie that far
// apart. Two times, not one, so that a single disturbed call (a kernel's first launch loads it)
// decides nothing. The heuristic's first never leaves (the choice falls back to it). The slowest
// candidates cost a product's tuning the most; they now run two trials instead of `samples`.
class GemmTrials {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  GemmTrials() = default;
  explicit GemmTrials(size_t candidates, int samples = kGemmTuneSamples)
      : samples_(static_cast<size_t>(samples)),
        milliseconds_(candidates),
        issued_(candidates, 0),
        state_(candidates, State::In) {}

  // The candidate the next timed call runs, or kNone once every candidate still in has all its
  // trials issued (the tuning then waits for their times).
  size_t next() const {
    size_t best = kNone;
    for (size_t c = 0; c < issued_.size(); ++c)
      if (state_[c] == State::In && issued_[c] < samples_ && (best == kNone || issued_[c] < issued_[best]))
        best = c;
    return best;
  }
  // A timed call of candidate c was issued.
  void issued(size_t c) { ++issued_.at(c); }
  // cuBLASLt refused to run candidate c: it leaves the tuning with no times (never the first).
  void refused(size_t c) {
    FERRY_ASSERT(c != 0, "the heuristic's first candidate is what runs when another is refused");
    state_.at(c) = State::Refused;
    milliseconds_[c].clear();
  }
  // The time of one of candidate c's calls, once its events completed.
  void filed(size_t c, float ms) {
    if (state_.at(c) == State::Refused) return;
    milliseconds_[c].push_back(ms);
    fastest_ = std::min(fastest_, ms);
    for (size_t o = 1; o < state_.size(); ++o) {
      if (state_[o] != State::In || milliseconds_[o].size() < 2) continue;
      const float own = *std::min_element(milliseconds_[o].begin(), milliseconds_[o].end());
      if (own >= kGemmTuneDropRatio * fastest_) state_[o] = State::Dropped;
    }
  }
  // Whether every candidate still in has all its times filed.
  bool complete() const {
    for (size_t c = 0; c < state_.size(); ++c)
      if (state_[c] == State::In && milliseconds_[c].size() < samples_) return false;
    return true;
  }
  // The choice among the candidates still in (choose_gemm_candidate).
  size_t choose(float margin) const {
    std::vector<std::vector<float>> in = milliseconds_;
    for (size_t c = 0; c < in.size(); ++c)
      if (state_[c] != State::In) in[c].clear();
    return choose_gemm_candidate(in, margin);
  }
  bool dropped(size_t c) const { return state_.at(c) == State::Dropped; }
  const std::vector<std::vector<float>>& milliseconds() const { return milliseconds_; }
  // Timed calls issued so far, over all candidates.
  size_t trials_issued() const {
    size_t n = 0;
    for (size_t i : issued_) n += i;
    return n;
  }

 private:
  enum class State { In, Dropped, Refused };
  size_t samples_ = 0;
  std::vector<std::vector<float>> milliseconds_;
  std::vector<size_t> issued_;
  std::vector<State> state_;
  float fastest_ = std::numeric_limits<float>::infinity();
};

// The debug log's line for a problem whose tuning ended: the candidate chosen, then every
// candidate's name (`names[i]`, cuBLASLt's configuration), the median of its trials in
// microseconds and how many there were (and whether it left the trials early), or that cuBLASLt
// refused to run it. It is what sets a step's choices beside a benchmark's for the same product.
inline std::string gemm_tuning_summary(const std::vector<std::string>& names, const GemmTrials& trials,
                                       size_t chosen) {
  const std::vector<std::vector<float>>& milliseconds = trials.milliseconds();
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
    std::snprintf(buffer, sizeof buffer, "%.1f us (%zu%s)", 1000.0 * medians[i], milliseconds[i].size(),
                  trials.dropped(i) ? ", dropped" : "");
    line += buffer;
  }
  return line;
}

}  // namespace ferry
