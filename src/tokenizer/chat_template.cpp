#include "tokenizer/chat_template.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/text_file.h"
#include "jinja/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "chat_template";

nlohmann::json read_json(const std::filesystem::path& path) {
  return parse_json(read_text_file(path, kWhere), kWhere, path.string(), "fix or re-download it");
}

// A special token entry: "text", {"content": "text", ...} (a serialized AddedToken), or null.
std::optional<std::string> token_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (json_has(value, "content", &nlohmann::json::is_string)) return value["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string name,
                           std::vector<std::pair<std::string, std::string>> special_tokens)
    : source_(std::move(source)),
      template_(jinja::Template::parse(source_, std::move(name))),
      special_tokens_(std::move(special_tokens)) {}

std::optional<std::string> ChatTemplate::template_from_config(const nlohmann::json& config,
                                                              const std::string& source) {
  if (!config.is_object()) return std::nullopt;
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    // transformers: a list of {"name": ..., "template": ...}; without an explicit choice it uses "default".
    std::string names;
    for (const auto& entry : *it) {
      FERRY_CHECK(json_has(entry, "name", &nlohmann::json::is_string) &&
                      json_has(entry, "template", &nlohmann::json::is_string),
                  kWhere, "{}: chat_template list entries must be {{\"name\": ..., \"template\": ...}}",
                  source);
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    fail(kWhere,
         "{}: chat_template is a list of named templates ({}) without one named 'default'; set "
         "chat_template: to a file with the template to use",
         source, names);
  }
  fail(kWhere, "{}: chat_template must be a string or a list of named templates, got {}", source,
       it->type_name());
}

std::vector<std::pair<std::string, std::string>> ChatTemplate::special_tokens_from_config(
    const nlohmann::json& config) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!config.is_object()) return out;
  for (const char* key :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = config.find(key);
    if (it == config.end()) continue;
    if (auto text = token_text(*it)) out.emplace_back(key, *text);
  }
  // A list in special_tokens_map; kept here as repeated entries, in order.
  if (const auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array())
    for (const auto& t : *it)
      if (auto text = token_text(t)) out.emplace_back("additional_special_tokens", *text);
  return out;
}

std::optional<ChatTemplate> ChatTemplate::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  nlohmann::json config;
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) config = read_json(config_path);
  const auto jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path, ec))
    return ChatTemplate(read_text_file(jinja_path, kWhere), jinja_path.string(),
                        special_tokens_from_config(config));
  if (auto text = template_from_config(config, config_path.string()))
    return ChatTemplate(*text, config_path.string(), special_tokens_from_config(config));
  return std::nullopt;
}

ChatTemplate ChatTemplate::from_file(const std::filesystem::path& path,
                                     const nlohmann::json& tokenizer_config) {
  std::error_code ec;
  FERRY_CHECK(std::filesystem::is_regular_file(path, ec), kWhere,
              "chat_template file {} does not exist; give a .jinja file or a tokenizer_config.json",
              path.string());
  if (path.extension() == ".json") {
    const nlohmann::json config = read_json(path);
    auto text = template_from_config(config, path.string());
    FERRY_CHECK(text.has_value(), kWhere, "{} has no \"chat_template\"", path.string());
    return ChatTemplate(*text, path.string(), special_tokens_from_config(tokenizer_config));
  }
  return ChatTemplate(read_text_file(path, kWhere), path.string(),
                      special_tokens_from_config(tokenizer_config));
}

ChatRendering ChatTemplate::render(const jinja::Value& messages, const ChatRenderOptions& options) const {
  FERRY_CHECK(messages.is_list(), kWhere, "messages must be a list of message dicts");
  jinja::RenderInput input;
  // transformers: render(messages=..., tools=None, documents=None, add_generation_prompt=...,
  // **special_tokens_map, **kwargs); raise_exception and strftime_now are environment globals.
  input.variables.emplace_back("messages", messages);
  input.variables.emplace_back("tools", jinja::Value::none());
  input.variables.emplace_back("documents", jinja::Value::none());
  input.variables.emplace_back("add_generation_prompt", jinja::Value(options.add_generation_prompt));
  std::vector<jinja::Value> additional;
  for (const auto& [k, v] : special_tokens_) {
    if (k == "additional_special_tokens")
      additional.emplace_back(v);
    else
      input.variables.emplace_back(k, jinja::Value(v));
  }
  if (!additional.empty())
    input.variables.emplace_back("additional_special_tokens", jinja::Value::list(additional));
  for (const auto& [k, v] : options.extra_variables) {
    bool replaced = false;
    for (auto& [name, value] : input.variables) {
      if (name == k) {
        value = v;
        replaced = true;
      }
    }
    if (!replaced) input.variables.emplace_back(k, v);
  }
  input.variables.emplace_back(
      "raise_exception", jinja::Value::function("raise_exception", [](jinja::CallArgs& args) -> jinja::Value {
        const std::string message = args.positional.empty() ? std::string() : args.positional[0].to_str();
        throw jinja::TemplateError("the template raised an exception: " + message);
      }));
  const std::optional<int64_t> now = options.now;
  input.variables.emplace_back(
      "strftime_now", jinja::Value::function("strftime_now", [now](jinja::CallArgs& args) {
        if (args.positional.size() != 1 || !args.positional[0].is_string() || !args.keyword.empty())
          throw jinja::TemplateError("strftime_now(format) takes one string");
        const std::time_t t = now ? static_cast<std::time_t>(*now) : std::time(nullptr);
        std::tm tm{};
        localtime_r(&t, &tm);
        char buffer[512];
        const size_t n = std::strftime(buffer, sizeof(buffer), args.positional[0].as_string().c_str(), &tm);
        if (n == 0 && !args.positional[0].as_string().empty())
          throw jinja::TemplateError("strftime_now: the formatted date is empty or too long");
        return jinja::Value(std::string(buffer, n));
      }));
  const auto& items = messages.list_data().items;
  for (const auto& m : items) input.tracked.push_back(m.identity());

  jinja::RenderResult result = template_.render(input);
  ChatRendering out;
  out.text = std::move(result.text);
  out.message_ranges.resize(items.size());
  for (const auto& run : result.runs)
    out.message_ranges[static_cast<size_t>(run.tracked_index)].emplace_back(run.begin, run.end);
  out.generation_spans = std::move(result.generation_spans);
  return out;
}

std::string ChatTemplate::apply(const jinja::Value& messages, bool add_generation_prompt) const {
  ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return render(messages, options).text;
}

}  // namespace ferry
