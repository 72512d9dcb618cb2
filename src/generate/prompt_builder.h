// Text and conversations → the prompt's token ids, as transformers builds them: a conversation is
// rendered by the model's chat template with add_generation_prompt=True and tokenized without
// added special tokens (the template writes them, as apply_chat_template(tokenize=True) does); a
// plain prompt is tokenized with them (the tokenizer's bos, as a text-generation pipeline does).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

struct PromptOptions {
  std::filesystem::path tokenizer;      // a tokenizer directory (empty: the model directory)
  std::filesystem::path chat_template;  // a .jinja (or tokenizer_config.json) replacing the model's
  // Template variables beside messages, as apply_chat_template(**kwargs) passes them.
  std::vector<std::pair<std::string, jinja::Value>> template_variables;
};

class PromptBuilder {
 public:
  // Errors when the directory has no tokenizer.json.
  PromptBuilder(const std::filesystem::path& model_dir, const PromptOptions& options);

  bool has_chat_template() const { return chat_template_.has_value(); }
  // `messages`: a JSON list of {"role", "content"} objects. Errors without a chat template, or when
  // the template rejects the conversation.
  std::vector<int32_t> conversation(const nlohmann::ordered_json& messages) const;
  std::vector<int32_t> plain(const std::string& text) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::filesystem::path dir_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  ChatRenderOptions render_;
};

// `name=value` → a template variable: value is read as JSON (true, 3, "text", [...]), and as a
// plain string when it is not JSON. Errors without '='.
std::pair<std::string, jinja::Value> parse_template_variable(const std::string& text);

}  // namespace ferry
