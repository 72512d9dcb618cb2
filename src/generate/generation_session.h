// What `ferry generate` and `ferry chat` run: a model, its tokenizer and chat template, and the
// generation loop, with the reply's text on one stream and progress and speed on stderr (so that
// stdout holds only the text, or the JSONL).
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "generate/generation_model.h"
#include "generate/generator.h"
#include "generate/prompt_builder.h"

namespace ferry {

struct GenerateOptions {
  std::filesystem::path model;
  std::string device = "auto";  // auto, cpu, cuda
  int64_t context = 0;          // tokens of cache; 0: what the prompts need, or kDefaultContext for chat
  int64_t max_new_tokens = 512;
  // Unset: generation_config.json's (greedy when it does not sample). greedy wins over the others.
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  bool greedy = false;
  uint64_t seed = 0;
  PromptOptions prompt;
  std::string system;  // a system message put before the conversation ("": none)
  bool raw = false;    // --prompt as plain text, without the chat template
  int64_t threads = 0;
};

// `ferry generate --prompt TEXT`: the reply, streamed to `out`, and a newline.
void generate_from_prompt(const GenerateOptions& options, const std::string& prompt, std::FILE* out);
// `ferry generate --messages FILE`: one conversation per line (a JSON list of messages, or an
// object with "messages"); one JSON line per conversation to `out`: {"messages": [... the reply
// appended as the assistant's], "finish_reason", "prompt_tokens", "completion_tokens"}.
void generate_from_messages(const GenerateOptions& options, const std::filesystem::path& messages,
                            std::FILE* out);
// `ferry chat`: turns read from `in` line by line, replies streamed to `out`; the conversation is
// kept (and its cache reused) until /reset; /exit, /quit or the end of `in` ends it.
void chat(const GenerateOptions& options, std::FILE* in, std::FILE* out);

// The sampling of a run: the options' values over generation_config.json's.
SamplingOptions resolve_sampling(const GenerateOptions& options, const GenerationDefaults& defaults);

}  // namespace ferry
