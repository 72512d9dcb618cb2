#include "generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ferry {

// generation_config.json's values are checked where they are read (generation_config.cpp, naming
// the file): what fails here came from the command line, so the message names its flag.
Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  FERRY_CHECK(options.temperature >= 0.0 && std::isfinite(options.temperature), "generate",
              "temperature {} is invalid (--temperature); give 0 for greedy decoding or a positive value",
              options.temperature);
  FERRY_CHECK(options.top_k >= 0, "generate",
              "top_k {} is invalid (--top-k); give 0 (no cut) or a positive count", options.top_k);
  FERRY_CHECK(options.top_p > 0.0 && options.top_p <= 1.0, "generate",
              "top_p {} is invalid (--top-p); give a value in (0, 1] (1: no cut)", options.top_p);
}

int32_t Sampler::next(const float* logits, int64_t vocab) {
  if (options_.temperature == 0.0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);

  // Largest first; ties keep the lower id first, so the cut and the draw do not depend on the sort.
  candidates_.clear();
  const float inv_t = static_cast<float>(1.0 / options_.temperature);
  for (int64_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i] * inv_t, static_cast<int32_t>(i));
  const auto larger = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  const bool cut = (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < keep) || options_.top_p < 1.0;
  if (!cut) {
    // Nothing is cut: the draw needs no order, only the largest logit for a stable softmax.
    std::iter_swap(candidates_.begin(), std::min_element(candidates_.begin(), candidates_.end(), larger));
  } else if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < keep) {
    keep = static_cast<size_t>(options_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(keep),
                      candidates_.end(), larger);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), larger);
  }
  // Softmax over the kept candidates, in double.
  std::vector<double> p(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    p[i] = std::exp(static_cast<double>(candidates_[i].first) - candidates_[0].first);
    sum += p[i];
  }
  // top_p: the smallest prefix whose mass reaches top_p (transformers removes the tokens whose
  // ascending cumulative mass is <= 1 - top_p, which keeps the same prefix), at least one token.
  if (options_.top_p < 1.0) {
    double mass = 0.0;
    size_t cut = 0;
    while (cut < keep) {
      mass += p[cut] / sum;
      ++cut;
      if (mass >= options_.top_p) break;
    }
    keep = cut;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += p[i];
  }
  // A 53-bit uniform in [0, sum): the same draw on every platform (std::uniform_real_distribution
  // is not specified bit for bit).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace ferry
