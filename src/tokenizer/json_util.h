// Checked access to tokenizer.json fields: a missing or mistyped field is a ferry::Error naming it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/json_text.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace ferry::tok {

inline const nlohmann::json& json_field(const nlohmann::json& object, const char* key, const char* what) {
  if (!object.is_object()) fail("tokenizer", "{} in tokenizer.json is not an object", what);
  const auto it = object.find(key);
  if (it == object.end()) fail("tokenizer", "{} in tokenizer.json has no \"{}\"", what, key);
  return *it;
}

inline std::string json_string(const nlohmann::json& object, const char* key, const char* what) {
  const auto& v = json_field(object, key, what);
  if (!v.is_string()) fail("tokenizer", "\"{}\" of {} in tokenizer.json is not a string", key, what);
  return v.get<std::string>();
}

inline const nlohmann::json& json_array(const nlohmann::json& object, const char* key, const char* what) {
  const auto& v = json_field(object, key, what);
  if (!v.is_array()) fail("tokenizer", "\"{}\" of {} in tokenizer.json is not an array", key, what);
  return v;
}

// Optional fields: `fallback` when absent or null; a value of another type is an error naming the
// field (nlohmann's value() would throw a type_error naming nothing).
inline bool json_bool(const nlohmann::json& object, const char* key, bool fallback, const char* what) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail("tokenizer", "\"{}\" of {} in tokenizer.json is {}, not true or false", key, what,
         json_excerpt(*it));
  return it->get<bool>();
}

inline std::string json_string(const nlohmann::json& object, const char* key, const std::string& fallback,
                               const char* what) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_string())
    fail("tokenizer", "\"{}\" of {} in tokenizer.json is {}, not a string", key, what, json_excerpt(*it));
  return it->get<std::string>();
}

inline size_t json_count(const nlohmann::json& object, const char* key, size_t fallback, const char* what) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
    fail("tokenizer", "\"{}\" of {} in tokenizer.json is {}, not a non-negative integer", key, what,
         json_excerpt(*it));
  return it->get<size_t>();
}

// A token id: an integer in [0, 2^31).
inline int32_t json_token_id(const nlohmann::json& value, const char* what) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
    fail("tokenizer", "{} in tokenizer.json has id {}; expected a non-negative integer", what,
         json_excerpt(value));
  return value.get<int32_t>();
}

// A field that must hold exactly one character (Metaspace's replacement, Strip's content).
inline char32_t json_char(const nlohmann::json& object, const char* key, const char* what,
                          const char* describe) {
  const std::string s = json_string(object, key, what);
  size_t i = 0;
  if (s.empty()) fail("tokenizer", "{} is empty; expected one character", describe);
  const char32_t cp = next_code_point(s, i);
  if (i != s.size()) fail("tokenizer", "{} is \"{}\"; expected one character", describe, s);
  return cp;
}

// {"pattern": {"String": "..."}} or {"pattern": {"Regex": "..."}}.
inline Regex json_pattern(const nlohmann::json& object, const char* what) {
  const auto& p = json_field(object, "pattern", what);
  if (p.is_object() && p.contains("String") && p["String"].is_string())
    return Regex::literal(p["String"].get<std::string>());
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
    return Regex::pattern(p["Regex"].get<std::string>());
  fail("tokenizer", "\"pattern\" of {} in tokenizer.json must be {{\"String\": ...}} or {{\"Regex\": ...}}",
       what);
}

}  // namespace ferry::tok
