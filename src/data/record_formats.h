// The record formats of training data (DESIGN.md §4) and how each becomes a TrainingText.
//
//   tokens             {"input_ids": [...], "labels": [...]}           pre-tokenized (token_dataset.h)
//   text               {"text": "..."}, and .txt files                   every token trained, eos appended
//   alpaca             {"instruction", "input"?, "output", "system"?, "history"?}
//   sharegpt           {"conversations": [{"from": "human"|"gpt"|"system", "value": "..."}], "system"?}
//   messages           {"messages": [{"role": ..., "content": ...}, ...]}  (OpenAI / transformers chat)
//   prompt_completion  {"prompt": "...", "completion": "..."}, or both lists of messages (TRL)
//
// Chat-shaped records (messages, sharegpt, alpaca, conversational prompt/completion) are rendered
// with the model's chat template (data/chat_text.h decides the trained bytes). Message dicts are
// passed to the template as they are in the record (extra keys like tool_calls or
// reasoning_content included, in their order). ShareGPT's from is mapped human/user → user,
// gpt/assistant → assistant, system → system, and a top-level "system" becomes a first system
// message. Alpaca becomes [system?] + history pairs + user(instruction, then "\n" + input when input
// is not empty, as LLaMA-Factory joins them) + assistant(output).
//
// Without a chat template, alpaca uses the Stanford Alpaca prompt (kAlpacaPrompt*), with the output
// trained and eos appended; system and history then have no place and are errors, as are sharegpt
// and messages records. Plain prompt/completion trains the completion, appended to the prompt as is
// (no separator), then eos. Text trains everything. Plain formats let the tokenizer add its special
// tokens (bos); chat-rendered text gets none beyond what the template writes.
//
// Unless train_on_prompt, a chat record without an assistant message has nothing to train and is
// malformed.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "data/chat_text.h"
#include "data/training_text.h"
#include "tokenizer/chat_template.h"

namespace ferry {

enum class DataFormat { Auto, Tokens, Text, Alpaca, ShareGpt, Messages, PromptCompletion };

// "auto", "tokens", "text", "alpaca", "sharegpt", "messages", "prompt_completion"
std::optional<DataFormat> parse_data_format(std::string_view name);
const char* data_format_name(DataFormat format);
// The names above, comma-separated, for messages.
std::string data_format_names();
// The format of a record from its keys: input_ids → tokens, messages → messages, conversations →
// sharegpt, instruction → alpaca, prompt and completion → prompt_completion, text → text.
std::optional<DataFormat> detect_data_format(const nlohmann::ordered_json& record);

inline constexpr const char* kAlpacaPromptWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n";
inline constexpr const char* kAlpacaPromptNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n";

struct RecordOptions {
  const ChatTemplate* chat_template = nullptr;  // the model's; null when it has none
  ChatTextOptions chat;                         // stop strings, template variables
  bool train_on_prompt = false;
};

// Converts one record of a text format (not Tokens, not Auto). Returns "" on success, otherwise
// what is wrong with the record (a template's raise_exception included), for a "file:line: ..."
// message.
std::string record_training_text(DataFormat format, const nlohmann::ordered_json& record,
                                 const RecordOptions& options, TrainingText* out);

}  // namespace ferry
