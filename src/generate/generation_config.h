// What a model directory says about generating from it: the ids that end a reply, and the
// sampling defaults of generation_config.json (as transformers' GenerationConfig reads them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "model/model_config.h"

namespace ferry {

// How the next token is chosen from the logits. temperature 0 is greedy (argmax); otherwise the
// logits are divided by the temperature, cut to the top_k largest (0: no cut) and to the smallest
// set whose probability reaches top_p (1: no cut), in that order as transformers' warpers do, and
// the token is drawn with the seed's generator.
struct SamplingOptions {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

struct GenerationDefaults {
  // Generation stops at any of these: generation_config.json's eos_token_id (an int or a list),
  // else config.json's. Empty when neither names one (generation then runs to its length limit).
  std::vector<int32_t> eos_ids;
  // generation_config.json's do_sample, temperature, top_k and top_p (transformers' defaults 1.0,
  // 50 and 1.0 where absent); greedy when do_sample is absent or false.
  SamplingOptions sampling;
};

// Reads DIR/generation_config.json when present; `config` is the model's config.json.
GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir,
                                            const ModelConfig& config);

}  // namespace ferry
