// Chat templates: a conversation → the text a model was trained to read, exactly as transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders it.
//
// transformers compiles the template in a jinja2 ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True, the loopcontrols extension and its {% generation %} tag,
// adds the globals raise_exception(msg) and strftime_now(fmt) and a tojson filter with
// ensure_ascii=False, and renders with messages=..., tools=None, documents=None,
// add_generation_prompt=..., and the tokenizer's special tokens (bos_token, eos_token, unk_token,
// pad_token, ..., additional_special_tokens as strings, those that are set). ferry does the same with
// its own interpreter (jinja_template.h); a construct it does not implement is an error naming the
// template line, never an approximation.
//
// Where the template comes from (as transformers loads it): chat_template.jinja in the tokenizer
// directory when present, else tokenizer_config.json's "chat_template", which is a string or a list
// of {"name", "template"} of which "default" is used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jinja/template.h"

namespace ferry {

struct ChatRenderOptions {
  bool add_generation_prompt = false;
  // More template variables, as apply_chat_template(**kwargs) passes them (e.g. enable_thinking).
  std::vector<std::pair<std::string, jinja::Value>> extra_variables;
  // The moment strftime_now() formats, in seconds since the epoch (local time, as Python's
  // datetime.now()); nullopt: the current time. Tests and goldens fix it.
  std::optional<int64_t> now;
};

struct ChatRendering {
  std::string text;
  // For each message (by index): the byte ranges of `text` written while a template loop was
  // visiting that message's dict (see jinja_template.h), in order; empty when none.
  std::vector<std::vector<std::pair<size_t, size_t>>> message_ranges;
  // Byte ranges of {% generation %} blocks, for templates that mark assistant output themselves.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

class ChatTemplate {
 public:
  // `source` is the template text; `name` names it in errors (e.g. "model/tokenizer_config.json").
  // special_tokens: the variables transformers adds from the tokenizer (see special_tokens_from_config).
  ChatTemplate(std::string source, std::string name,
               std::vector<std::pair<std::string, std::string>> special_tokens);

  // The template of a tokenizer directory (chat_template.jinja, else tokenizer_config.json's
  // chat_template), with special tokens from its tokenizer_config.json; nullopt when it has none.
  static std::optional<ChatTemplate> load(const std::filesystem::path& tokenizer_dir);
  // An explicit template file: a .jinja text file, or a JSON file with "chat_template"
  // (tokenizer_config.json). Special tokens come from `tokenizer_config` (may be null).
  static ChatTemplate from_file(const std::filesystem::path& path, const nlohmann::json& tokenizer_config);
  // The template text in tokenizer_config.json content, or nullopt. `source` names the file in errors.
  static std::optional<std::string> template_from_config(const nlohmann::json& config,
                                                         const std::string& source);
  // bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token (strings or
  // {"content": ...}) and additional_special_tokens, as transformers' special_tokens_map has them.
  static std::vector<std::pair<std::string, std::string>> special_tokens_from_config(
      const nlohmann::json& config);

  // Renders `messages` (a list of dicts, e.g. jinja::from_json of [{"role":..., "content":...}]).
  // Throws ferry::Error for a template error, including raise_exception() from the template.
  ChatRendering render(const jinja::Value& messages, const ChatRenderOptions& options = {}) const;
  // render(...).text
  std::string apply(const jinja::Value& messages, bool add_generation_prompt) const;

  const std::string& source() const { return source_; }
  const std::string& name() const { return template_.name(); }
  // The special token strings rendering passes (name → text), e.g. {"eos_token", "</s>"}; each of
  // additional_special_tokens is an entry of that name (rendering passes them as one list).
  const std::vector<std::pair<std::string, std::string>>& special_tokens() const { return special_tokens_; }

 private:
  std::string source_;
  jinja::Template template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
};

}  // namespace ferry
