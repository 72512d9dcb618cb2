// The generation loop over a CachedDecoder: prefill a prompt, then sample one token at a time
// until a stop id, the token limit or the end of the context.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "generate/cached_decoder.h"
#include "generate/sampler.h"

namespace ferry {

enum class FinishReason {
  Stop,     // the model produced one of the stop ids
  Length,   // max_new_tokens were produced
  Context,  // the context (--context, or max_position_embeddings) is full
};
const char* finish_reason_name(FinishReason reason);

struct GenerationResult {
  std::vector<int32_t> tokens;  // the new tokens, the stop id excluded
  FinishReason finish = FinishReason::Length;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;  // prompt tokens already in the cache (an earlier turn's)
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

class Generator {
 public:
  // `stop_ids`: generation_config's eos ids (GenerationDefaults::eos_ids).
  Generator(CachedDecoder& decoder, std::vector<int32_t> stop_ids);

  // Runs `prompt` (reusing the cached tokens it starts with) and samples up to max_new_tokens;
  // on_token, when given, sees each new token as it is chosen (the stop id excluded).
  GenerationResult generate(const std::vector<int32_t>& prompt, Sampler& sampler, int64_t max_new_tokens,
                            const std::function<void(int32_t)>& on_token = {});

  // Forgets the cache (a new conversation).
  void reset();

 private:
  CachedDecoder& decoder_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> cached_;  // the tokens in the decoder's cache, in order
};

}  // namespace ferry
