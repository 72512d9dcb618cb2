#include "mutator.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ferry::faults {

namespace {

using nlohmann::json;

// Values a parsed field may be replaced with: each type, the edges of the integer and floating
// ranges, and strings that are empty, long or not UTF-8-clean once escaped.
const std::vector<json>& extreme_values() {
  static const std::vector<json> values = {
      json(nullptr),
      json(true),
      json(false),
      json(0),
      json(-1),
      json(1),
      json(2147483647),
      json(2147483648LL),
      json(-9223372036854775807LL - 1),
      json(18446744073709551615ULL),
      json(0.5),
      json(-1e300),
      json(1e300),
      json(""),
      json(std::string(300, 'x')),
      json("\xC3\xA9\xE2\x96\x81"),
      json::array(),
      json::array({1, "a", nullptr}),
      json::object(),
      json{{"type", "BPE"}},
  };
  return values;
}

// Every node of `root`, as JSON pointers, in document order.
void collect_pointers(const json& node, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) collect_pointers(value, at / key, out);
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) collect_pointers(node[i], at / i, out);
  }
}

}  // namespace

Mutator::Mutator(std::vector<std::string> seeds, std::vector<std::string> tokens, bool json,
                 uint64_t rng_seed)
    : seeds_(std::move(seeds)), tokens_(std::move(tokens)), json_(json), rng_(rng_seed) {}

std::string Mutator::next() {
  std::string s = seeds_[below(seeds_.size())];
  if (seeds_.size() > 1 && below(8) == 0) {
    // A splice: a prefix of this seed and a suffix of another.
    const std::string& other = seeds_[below(seeds_.size())];
    s = s.substr(0, below(s.size() + 1)) + other.substr(below(other.size() + 1));
  }
  if (json_ && below(2) == 0 && mutate_json(s)) {
    if (below(4) == 0) mutate_bytes(s);
    return s;
  }
  const size_t rounds = 1 + below(4);
  for (size_t r = 0; r < rounds; ++r) mutate_bytes(s);
  return s;
}

void Mutator::mutate_bytes(std::string& s) {
  static const char kSpecial[] = {'\0', '\xff', '"', '\'', '\\', '[',    ']',    '{', '}', ':', ',', '\n',
                                  '-',  '.',    'e', '0',  '9',  '\x80', '\xc3', '%', '|', '(', ')', ' '};
  const size_t at = below(s.size() + 1);
  switch (below(8)) {
    case 0:  // flip one to eight bits
      if (!s.empty()) {
        const size_t flips = 1 + below(8);
        for (size_t i = 0; i < flips; ++i) s[below(s.size())] ^= static_cast<char>(1u << below(8));
      }
      break;
    case 1:  // set a byte to one parsers care about
      if (!s.empty()) s[below(s.size())] = kSpecial[below(sizeof kSpecial)];
      break;
    case 2:  // insert random bytes
    {
      std::string bytes(1 + below(16), '\0');
      for (char& c : bytes) c = static_cast<char>(rng_());
      s.insert(at, bytes);
      break;
    }
    case 3:  // insert a token of the language
      s.insert(at, tokens_[below(tokens_.size())]);
      break;
    case 4:  // delete a range
      s.erase(at, 1 + below(std::min<size_t>(64, s.size() - std::min(at, s.size()) + 1)));
      break;
    case 5:  // duplicate a range
    {
      const size_t from = below(s.size() + 1);
      const std::string piece = s.substr(from, 1 + below(64));
      s.insert(at, piece);
      break;
    }
    case 6:  // truncate
      s.resize(below(s.size() + 1));
      break;
    default:  // repeat one byte many times (long runs, deep nesting)
      if (!s.empty()) s.insert(at, 1 + below(2048), s[below(s.size())]);
      break;
  }
}

bool Mutator::mutate_json(std::string& s) {
  json root = json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return false;
  std::vector<json::json_pointer> pointers;
  collect_pointers(root, json::json_pointer(), pointers);
  const json::json_pointer& target = pointers[below(pointers.size())];
  switch (below(4)) {
    case 0:
    case 1:  // replace the value
      root[target] = extreme_values()[below(extreme_values().size())];
      break;
    case 2:  // remove it from its parent
      if (target.empty()) return false;
      if (root[target.parent_pointer()].is_object()) {
        root[target.parent_pointer()].erase(target.back());
      } else {
        root[target] = nullptr;
      }
      break;
    default:  // wrap it in arrays, sometimes past any sane depth
    {
      json value = root[target];
      const size_t levels = below(4) == 0 ? 600 : 1 + below(4);
      for (size_t i = 0; i < levels; ++i) value = json::array({std::move(value)});
      root[target] = std::move(value);
      break;
    }
  }
  s = root.dump(below(2) == 0 ? -1 : 1, ' ', false, json::error_handler_t::replace);
  return true;
}

std::vector<std::string> json_tokens() {
  return {"null",    "true", "-1",      "0",       "1e400",    "18446744073709551616",
          "-0.0",    "\"\"", "[]",      "{}",      "[[[[[[[[", "]]]]",
          "\"a\": ", ",",    "\\u0000", "\\ud800", "\"\\",     "NaN",
          "Infinity"};
}

std::vector<std::string> yaml_tokens() {
  return {": ",    "- ",    "\n  ", "&a ",  "*a",   "<<: ", "!!binary ", "!!int ",     "? ",
          "[",     "]",     "{",    "}",    "\"",   "'",    "#",         "|",          ">",
          "---\n", "...\n", "~",    ".inf", "1e30", "0x7f", "\t",        "%YAML 1.2\n"};
}

std::vector<std::string> jinja_tokens() {
  return {"{{",
          "}}",
          "{%",
          "%}",
          "{#",
          "#}",
          "{%-",
          "-%}",
          "(",
          ")",
          "[",
          "]",
          "{",
          "}",
          "|",
          "|trim",
          ".",
          "..",
          "'",
          "\"",
          " if ",
          " else ",
          " not ",
          " in ",
          " is ",
          " and ",
          "{% for x in y %}",
          "{% endfor %}",
          "{% if x %}",
          "{% endif %}",
          "{% set x = 1 %}",
          "{% macro m(a) %}",
          "{% endmacro %}",
          "0x",
          "1e999",
          "\\x",
          "**",
          "//",
          "~"};
}

}  // namespace ferry::faults
