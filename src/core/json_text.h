// JSON that users bring (config.json, tokenizer.json, safetensors headers, data records): parsed
// with the nesting bounded, and shown in messages only as a short excerpt.
//
// nlohmann's parser does not recurse, but copying, comparing, printing and most code that walks a
// value does: a line of 100,000 '[' parses fine and then overflows the stack wherever it is
// used. Real files nest a handful of levels (tokenizer.json about 6), so text nested deeper than
// kMaxJsonNesting is refused before it is parsed, by a scan of its brackets.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ferry {

// Deepest nesting of arrays and objects that parse_json accepts.
inline constexpr size_t kMaxJsonNesting = 512;

// Why `text` nests arrays and objects deeper than `limit` ("arrays and objects nested deeper than
// 512 levels (at line 1, column 513)"), or "" when it does not. Brackets inside strings do not
// count. Linear in the text and allocation-free, so it can run before any parsing.
std::string json_nesting_problem(std::string_view text, size_t limit = kMaxJsonNesting);

// Parses `text`: the value, or nullopt with *error set to a sentence for a message (invalid JSON
// with nlohmann's line and column, a number out of range, or too deep a nesting). Never throws
// for bad text.
std::optional<nlohmann::json> try_parse_json(std::string_view text, std::string* error);
std::optional<nlohmann::ordered_json> try_parse_ordered_json(std::string_view text, std::string* error);

// Whether `object` is an object holding `key` with a value that `is` accepts
// (&nlohmann::json::is_string, ...): the check before reading a key of a const value, whose
// operator[] must not be asked for a missing key and whose value() throws on another type.
bool json_has(const nlohmann::json& object, const char* key, bool (nlohmann::json::*is)() const noexcept);

// Parses a whole file's text; throws ferry::Error "[where] SOURCE: not valid JSON (...); ADVICE".
nlohmann::json parse_json(std::string_view text, const char* where, const std::string& source,
                          std::string_view advice);

// A JSON value for an error message: at most about `max_chars` characters, arrays and objects
// shown only a few levels deep, invalid UTF-8 replaced. Costs O(max_chars) whatever the value's
// size or depth (it never dumps the whole value).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 60);

// An object's keys for a message: "'text', 'meta'", the first few only ("... and 40 more"), or
// "none"; "not an object" for other values.
std::string json_key_list(const nlohmann::json& object);
std::string json_key_list(const nlohmann::ordered_json& object);

}  // namespace ferry
