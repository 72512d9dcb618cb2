#include "generate/prompt_builder.h"

#include "core/error.h"
#include "core/json_text.h"
#include "core/text_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "generate";

}  // namespace

PromptBuilder::PromptBuilder(const std::filesystem::path& model_dir, const PromptOptions& options)
    : dir_(options.tokenizer.empty() ? model_dir : options.tokenizer) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir_, ec)) dir_ = dir_.parent_path();
  FERRY_CHECK(std::filesystem::exists(dir_ / "tokenizer.json", ec), kWhere,
              "{} has no tokenizer.json, which generation needs to read prompts and write replies; give "
              "--tokenizer DIR (the base model's directory, say)",
              dir_.string());
  tokenizer_ = Tokenizer::load(dir_);
  if (!options.chat_template.empty()) {
    nlohmann::json config = nlohmann::json::object();
    if (std::filesystem::exists(dir_ / "tokenizer_config.json", ec)) {
      const auto path = dir_ / "tokenizer_config.json";
      config = parse_json(read_text_file(path, kWhere), kWhere, path.string(), "fix or re-download it");
    }
    chat_template_ = ChatTemplate::from_file(options.chat_template, config);
  } else {
    chat_template_ = ChatTemplate::load(dir_);
  }
  render_.add_generation_prompt = true;
  render_.extra_variables = options.template_variables;
}

std::vector<int32_t> PromptBuilder::conversation(const nlohmann::ordered_json& messages) const {
  FERRY_CHECK(chat_template_.has_value(), kWhere,
              "{} has no chat template (neither chat_template.jinja nor tokenizer_config.json's "
              "\"chat_template\"), so a conversation cannot be written as the model reads it; give one with "
              "--chat-template FILE.jinja, or give plain text with --prompt",
              dir_.string());
  FERRY_CHECK(messages.is_array() && !messages.empty(), kWhere,
              "a conversation must be a non-empty list of {{\"role\": ..., \"content\": ...}} messages");
  for (const auto& m : messages)
    FERRY_CHECK(json_has(m, "role", &nlohmann::json::is_string), kWhere,
                "message {} has no \"role\"; each message is {{\"role\": ..., \"content\": ...}}", m.dump());
  const std::string text = chat_template_->render(jinja::from_json(messages), render_).text;
  return tokenizer_->encode(text, false);
}

std::vector<int32_t> PromptBuilder::plain(const std::string& text) const {
  return tokenizer_->encode(text, true);
}

std::pair<std::string, jinja::Value> parse_template_variable(const std::string& text) {
  const size_t eq = text.find('=');
  FERRY_CHECK(eq != std::string::npos && eq > 0, kWhere,
              "template variable '{}' is not name=value (e.g. enable_thinking=false)", text);
  const std::string name = text.substr(0, eq), value = text.substr(eq + 1);
  std::string error;
  if (auto json = try_parse_json(value, &error))
    return {name, jinja::from_json(nlohmann::ordered_json::parse(json->dump()))};
  return {name, jinja::from_json(nlohmann::ordered_json(value))};
}

}  // namespace ferry
