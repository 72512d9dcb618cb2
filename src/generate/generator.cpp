#include "generate/generator.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace ferry {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Context:
      return "context";
  }
  return "?";
}

Generator::Generator(CachedDecoder& decoder, std::vector<int32_t> stop_ids)
    : decoder_(decoder), stop_ids_(std::move(stop_ids)) {}

void Generator::reset() {
  decoder_.truncate(0);
  cached_.clear();
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt, Sampler& sampler,
                                     int64_t max_new_tokens, const std::function<void(int32_t)>& on_token) {
  FERRY_CHECK(!prompt.empty(), "generate", "the prompt has no tokens; give some text");
  FERRY_CHECK(max_new_tokens >= 0, "generate", "max_new_tokens {} is invalid; give 0 or more",
              max_new_tokens);
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  FERRY_CHECK(r.prompt_tokens <= decoder_.context(), "generate",
              "the prompt has {} tokens, more than the context of {}; shorten it{}", r.prompt_tokens,
              decoder_.context(),
              decoder_.context() < decoder_.max_context() ? " or give a larger --context" : "");

  // The prompt's tokens already cached (an earlier turn of the same conversation) are kept; at least
  // one token is fed, for its logits.
  size_t common = 0;
  while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) ++common;
  if (common == prompt.size()) --common;
  decoder_.truncate(static_cast<int64_t>(common));
  cached_.resize(common);
  r.reused_tokens = static_cast<int64_t>(common);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> rest(prompt.begin() + static_cast<std::ptrdiff_t>(common), prompt.end());
  const std::vector<float>* logits = &decoder_.feed(rest);
  cached_.insert(cached_.end(), rest.begin(), rest.end());
  r.prefill_seconds = seconds_since(start);
  const auto prefilled = std::chrono::steady_clock::now();

  const int64_t vocab = static_cast<int64_t>(logits->size());
  r.finish = FinishReason::Length;
  while (static_cast<int64_t>(r.tokens.size()) < max_new_tokens) {
    const int32_t next = sampler.next(logits->data(), vocab);
    if (std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end()) {
      r.finish = FinishReason::Stop;
      break;
    }
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (static_cast<int64_t>(r.tokens.size()) == max_new_tokens) break;
    if (decoder_.length() >= decoder_.context()) {
      r.finish = FinishReason::Context;
      break;
    }
    logits = &decoder_.feed(std::vector<int32_t>{next});
    cached_.push_back(next);
  }
  r.decode_seconds = seconds_since(prefilled);
  return r;
}

}  // namespace ferry
