// The choice of the next token from one position's logits (SamplingOptions, generation_config.h).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "generate/generation_config.h"

namespace ferry {

class Sampler {
 public:
  // Errors for a negative temperature or top_k, or a top_p outside (0, 1].
  explicit Sampler(const SamplingOptions& options);

  // The next token of logits (V); greedy takes the first of equal maxima (as torch.argmax).
  int32_t next(const float* logits, int64_t vocab);

  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // (scaled logit, id), reused
};

}  // namespace ferry
