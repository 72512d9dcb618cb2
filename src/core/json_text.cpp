#include "core/json_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace ferry {

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is what users need.
std::string without_exception_id(const std::string& what) {
  const size_t bracket = what.find("] ");
  if (what.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) return what.substr(bracket + 2);
  return what;
}

template <typename Json>
std::optional<Json> parse_bounded(std::string_view text, std::string* error) {
  std::string problem = json_nesting_problem(text);
  if (!problem.empty()) {
    *error = std::move(problem);
    return std::nullopt;
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error for bad syntax or UTF-8; out_of_range for a number such as 1e400.
    *error = fmt::format("not valid JSON ({})", without_exception_id(e.what()));
    return std::nullopt;
  }
}

// The longest prefix of `s` of at most `n` bytes that does not end inside a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// Appends `value` to `out` until `out` reaches `limit` bytes; containers deeper than a few levels
// are elided, so neither the recursion nor the work depends on the value.
template <typename Json>
void append_excerpt(const Json& value, size_t limit, int depth, std::string& out) {
  constexpr int kShownLevels = 3;
  auto quoted = [&](std::string_view s) {
    const size_t room = limit > out.size() ? limit - out.size() : 0;
    std::string text(utf8_prefix(s, room + 1));
    out += Json(std::move(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (value.is_object() || value.is_array()) {
    const bool object = value.is_object();
    out += object ? '{' : '[';
    if (!value.empty() && depth >= kShownLevels) out += "...";
    if (depth < kShownLevels) {
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (out.size() >= limit) {
          out += "...";
          break;
        }
        if (!first) out += ", ";
        first = false;
        if (object) {
          quoted(it.key());
          out += ": ";
        }
        append_excerpt(it.value(), limit, depth + 1, out);
      }
    }
    out += object ? '}' : ']';
  } else if (value.is_string()) {
    quoted(value.template get_ref<const std::string&>());
  } else if (value.is_binary()) {
    out += "<binary>";
  } else {
    out += value.dump();  // a number, a boolean or null: short
  }
}

template <typename Json>
std::string excerpt(const Json& value, size_t max_chars) {
  std::string out;
  append_excerpt(value, max_chars, 0, out);
  if (out.size() > max_chars) out = std::string(utf8_prefix(out, max_chars > 3 ? max_chars - 3 : 0)) + "...";
  return out;
}

template <typename Json>
std::string key_list(const Json& object) {
  if (!object.is_object()) return "not an object";
  constexpr size_t kShown = 12;
  std::string keys;
  size_t count = 0;
  for (auto it = object.begin(); it != object.end(); ++it, ++count) {
    if (count == kShown) {
      keys += fmt::format(" and {} more", object.size() - kShown);
      break;
    }
    keys += fmt::format("{}'{}'", keys.empty() ? "" : ", ", utf8_prefix(it.key(), 40));
  }
  return keys.empty() ? "none" : keys;
}

}  // namespace

std::string json_nesting_problem(std::string_view text, size_t limit) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth <= limit) continue;
      const size_t line_start = text.rfind('\n', i);
      const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + i, '\n'));
      const size_t column = line_start == std::string_view::npos ? i + 1 : i - line_start;
      return fmt::format(
          "arrays and objects nested deeper than {} levels (at line {}, column {}), which ferry does not "
          "read; no "
          "real file nests this deep, so it is probably corrupt",
          limit, line, column);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return "";
}

std::optional<nlohmann::json> try_parse_json(std::string_view text, std::string* error) {
  return parse_bounded<nlohmann::json>(text, error);
}

std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text, std::string* error) {
  return parse_bounded<nlohmann::ordered_json>(text, error);
}

nlohmann::json parse_json(std::string_view text, const char* where, const std::string& source,
                          std::string_view advice) {
  std::string error;
  std::optional<nlohmann::json> value = try_parse_json(text, &error);
  if (!value) fail(where, "{}: {}; {}", source, error, advice);
  return std::move(*value);
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  return excerpt(value, max_chars);
}
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  return excerpt(value, max_chars);
}

std::string json_key_list(const nlohmann::json& object) {
  return key_list(object);
}
std::string json_key_list(const nlohmann::ordered_json& object) {
  return key_list(object);
}

bool json_has(const nlohmann::json& object, const char* key, bool (nlohmann::json::*is)() const noexcept) {
  if (!object.is_object()) return false;
  const auto found = object.find(key);
  return found != object.end() && ((*found).*is)();
}

}  // namespace ferry
