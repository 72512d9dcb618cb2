#include "data/record_formats.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_text.h"

namespace ferry {

namespace {

using nlohmann::ordered_json;

constexpr std::pair<DataFormat, const char*> kNames[] = {{DataFormat::Auto, "auto"},
                                                         {DataFormat::Tokens, "tokens"},
                                                         {DataFormat::Text, "text"},
                                                         {DataFormat::Alpaca, "alpaca"},
                                                         {DataFormat::ShareGpt, "sharegpt"},
                                                         {DataFormat::Messages, "messages"},
                                                         {DataFormat::PromptCompletion, "prompt_completion"}};

std::string show(const ordered_json& v) {
  return json_excerpt(v, 40);
}

// A required string field; "" on success.
std::string get_string(const ordered_json& record, const char* key, std::string* out, bool required = true) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    out->clear();
    return required ? fmt::format("no '{}' (keys found: {})", key, json_key_list(record)) : "";
  }
  if (!it->is_string()) return fmt::format("'{}' is {} ({}), not a string", key, show(*it), it->type_name());
  *out = it->get<std::string>();
  return "";
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
  return text;
}

ordered_json message(const char* role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// Renders a list of message dicts with the chat template.
std::string chat_text(const ordered_json& messages, size_t first_trained, const RecordOptions& options,
                      TrainingText* out) {
  bool has_assistant = false;
  for (size_t i = first_trained; i < messages.size(); ++i)
    has_assistant = has_assistant || messages[i].value("role", std::string()) == "assistant";
  if (!has_assistant && !options.train_on_prompt)
    return "no assistant message, so nothing to train on (set train_on_prompt: true to train on such "
           "records)";
  ChatTextOptions chat = options.chat;
  chat.train_on_prompt = options.train_on_prompt;
  chat.first_trained_message = first_trained;
  try {
    *out = chat_training_text(*options.chat_template, jinja::from_json(messages), chat);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string need_template(const char* format) {
  return fmt::format(
      "{} records are rendered with the model's chat template, and the model has none; set chat_template: to "
      "a template file (or use a model with a chat template)",
      format);
}

// Checks a list of message dicts; "" when fine.
std::string check_messages(const ordered_json& messages, const char* key) {
  if (!messages.is_array())
    return fmt::format("'{}' is {} ({}), not a list of messages", key, show(messages), messages.type_name());
  if (messages.empty()) return fmt::format("'{}' is empty", key);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    if (!m.is_object())
      return fmt::format("'{}'[{}] is {}, not an object with 'role' and 'content'", key, i, show(m));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return fmt::format("'{}'[{}] has no string 'role' (keys found: {})", key, i, json_key_list(m));
    const auto content = m.find("content");
    const bool has_tool_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (content == m.end() || content->is_null()) {
      if (!has_tool_calls)
        return fmt::format("'{}'[{}] ({}) has no 'content'", key, i, role->get<std::string>());
    } else if (!content->is_string() && !content->is_array()) {
      return fmt::format("'{}'[{}].content is {}, not a string", key, i, show(*content));
    }
  }
  return "";
}

std::string from_messages(const ordered_json& record, const RecordOptions& options, TrainingText* out) {
  if (!options.chat_template) return need_template("messages");
  const auto it = record.find("messages");
  if (it == record.end()) return fmt::format("no 'messages' (keys found: {})", json_key_list(record));
  std::string error = check_messages(*it, "messages");
  if (!error.empty()) return error;
  return chat_text(*it, 0, options, out);
}

std::string from_sharegpt(const ordered_json& record, const RecordOptions& options, TrainingText* out) {
  if (!options.chat_template) return need_template("sharegpt");
  const auto it = record.find("conversations");
  if (it == record.end()) return fmt::format("no 'conversations' (keys found: {})", json_key_list(record));
  if (!it->is_array() || it->empty())
    return fmt::format("'conversations' is {}, not a non-empty list of turns", show(*it));
  ordered_json messages = ordered_json::array();
  std::string system;
  std::string error = get_string(record, "system", &system, false);
  if (!error.empty()) return error;
  if (!system.empty()) messages.push_back(message("system", system));
  for (size_t i = 0; i < it->size(); ++i) {
    const ordered_json& turn = (*it)[i];
    if (!turn.is_object())
      return fmt::format("'conversations'[{}] is {}, not an object with 'from' and 'value'", i, show(turn));
    std::string from, value;
    error = get_string(turn, "from", &from);
    if (error.empty()) error = get_string(turn, "value", &value);
    if (!error.empty()) return fmt::format("'conversations'[{}]: {}", i, error);
    const char* role = nullptr;
    if (from == "human" || from == "user") role = "user";
    if (from == "gpt" || from == "assistant") role = "assistant";
    if (from == "system") role = "system";
    if (!role)
      return fmt::format("'conversations'[{}] is from '{}'; ShareGPT turns are from human, gpt or system", i,
                         from);
    messages.push_back(message(role, value));
  }
  return chat_text(messages, 0, options, out);
}

std::string from_alpaca(const ordered_json& record, const RecordOptions& options, TrainingText* out) {
  std::string instruction, input, output, system;
  std::string error = get_string(record, "instruction", &instruction);
  if (error.empty()) error = get_string(record, "output", &output);
  if (error.empty()) error = get_string(record, "input", &input, false);
  if (error.empty()) error = get_string(record, "system", &system, false);
  if (!error.empty()) return error;
  if (output.empty()) return "'output' is empty; there is nothing to train on";
  const auto history = record.find("history");
  const bool has_history =
      history != record.end() && !history->is_null() && !(history->is_array() && history->empty());

  if (options.chat_template) {
    ordered_json messages = ordered_json::array();
    if (!system.empty()) messages.push_back(message("system", system));
    if (has_history) {
      if (!history->is_array())
        return fmt::format("'history' is {}, not a list of [instruction, response] pairs", show(*history));
      for (size_t i = 0; i < history->size(); ++i) {
        const ordered_json& pair = (*history)[i];
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
          return fmt::format("'history'[{}] is {}, not an [instruction, response] pair of strings", i,
                             show(pair));
        messages.push_back(message("user", pair[0].get<std::string>()));
        messages.push_back(message("assistant", pair[1].get<std::string>()));
      }
    }
    messages.push_back(message("user", input.empty() ? instruction : instruction + "\n" + input));
    messages.push_back(message("assistant", output));
    return chat_text(messages, 0, options, out);
  }
  if (has_history || !system.empty())
    return "alpaca 'system' and 'history' need a chat template to be placed, and the model has none; set "
           "chat_template: to a template file, or drop those fields";
  std::string prompt = replace_all(input.empty() ? kAlpacaPromptNoInput : kAlpacaPromptWithInput,
                                   "{instruction}", instruction);
  prompt = replace_all(prompt, "{input}", input);
  out->text = prompt + output;
  out->add_special_tokens = true;
  out->trained.clear();
  out->eos_after.clear();
  if (options.train_on_prompt) {
    out->trained.push_back({0, out->text.size()});
  } else {
    out->trained.push_back({prompt.size(), out->text.size()});
  }
  out->eos_after.push_back(true);
  return "";
}

std::string from_prompt_completion(const ordered_json& record, const RecordOptions& options,
                                   TrainingText* out) {
  const auto prompt = record.find("prompt");
  const auto completion = record.find("completion");
  if (prompt == record.end() || completion == record.end())
    return fmt::format("prompt/completion records need 'prompt' and 'completion' (keys found: {})",
                       json_key_list(record));
  if (prompt->is_array() && completion->is_array()) {
    // TRL's conversational form: the prompt's messages are context, the completion's are trained.
    if (!options.chat_template) return need_template("conversational prompt/completion");
    ordered_json messages = *prompt;
    for (const auto& m : *completion) messages.push_back(m);
    std::string error = check_messages(messages, "prompt' + 'completion");
    if (!error.empty()) return error;
    return chat_text(messages, prompt->size(), options, out);
  }
  std::string p, c;
  std::string error = get_string(record, "prompt", &p);
  if (error.empty()) error = get_string(record, "completion", &c);
  if (!error.empty()) return error + " (or give both as lists of messages)";
  if (c.empty()) return "'completion' is empty; there is nothing to train on";
  out->text = p + c;
  out->add_special_tokens = true;
  out->trained = {options.train_on_prompt || p.empty() ? ByteRange{0, out->text.size()}
                                                       : ByteRange{p.size(), out->text.size()}};
  out->eos_after = {true};
  return "";
}

std::string from_text(const ordered_json& record, TrainingText* out) {
  std::string text;
  std::string error = get_string(record, "text", &text);
  if (!error.empty()) return error;
  if (text.empty()) return "'text' is empty";
  out->text = std::move(text);
  out->add_special_tokens = true;
  out->trained = {ByteRange{0, out->text.size()}};
  out->eos_after = {true};
  return "";
}

}  // namespace

std::optional<DataFormat> parse_data_format(std::string_view name) {
  for (const auto& [format, n] : kNames)
    if (name == n) return format;
  return std::nullopt;
}

const char* data_format_name(DataFormat format) {
  for (const auto& [f, n] : kNames)
    if (f == format) return n;
  return "?";
}

std::string data_format_names() {
  std::string s;
  for (const auto& [f, n] : kNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::optional<DataFormat> detect_data_format(const ordered_json& record) {
  if (!record.is_object()) return std::nullopt;
  if (record.contains("input_ids")) return DataFormat::Tokens;
  if (record.contains("messages")) return DataFormat::Messages;
  if (record.contains("conversations")) return DataFormat::ShareGpt;
  if (record.contains("instruction")) return DataFormat::Alpaca;
  if (record.contains("prompt") && record.contains("completion")) return DataFormat::PromptCompletion;
  if (record.contains("text")) return DataFormat::Text;
  return std::nullopt;
}

std::string record_training_text(DataFormat format, const ordered_json& record, const RecordOptions& options,
                                 TrainingText* out) {
  if (!record.is_object())
    return fmt::format("a JSON {}, not an object; each record must be a JSON object", record.type_name());
  *out = TrainingText();
  switch (format) {
    case DataFormat::Text:
      return from_text(record, out);
    case DataFormat::Alpaca:
      return from_alpaca(record, options, out);
    case DataFormat::ShareGpt:
      return from_sharegpt(record, options, out);
    case DataFormat::Messages:
      return from_messages(record, options, out);
    case DataFormat::PromptCompletion:
      return from_prompt_completion(record, options, out);
    default:
      FERRY_ASSERT(false, "record_training_text is for text formats");
  }
  return "";
}

}  // namespace ferry
