// The Jinja lexer, with the whitespace rules transformers renders chat templates with:
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False (jinja2 3.1's lexer).
//
// * Line endings are normalised to \n and one trailing newline of the source is dropped.
// * `{%-` / `{#-` / `{{-` strip all whitespace before the tag; `-%}` / `-#}` / `-}}` all after it.
// * trim_blocks: a block or comment tag's end (`%}`, `#}`) swallows one directly following \n
//   (unless written `+%}`).
// * lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag are
//   removed (unless written `{%+`); variable tags `{{` are never lstripped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::jinja {

enum class TokenType : uint8_t {
  Data,           // literal template text
  VariableBegin,  // {{
  VariableEnd,    // }}
  BlockBegin,     // {%
  BlockEnd,       // %}
  Name,
  String,  // value: the unescaped string
  Integer,
  Float,
  Operator,  // value: the operator text, e.g. "==", "(", "|"
  End,
};

struct Token {
  TokenType type = TokenType::End;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;  // in bytes, from 1
};

// Throws ferry::Error ("[jinja] NAME:LINE: ...") on a lexical error (unterminated tag or string,
// unexpected character).
std::vector<Token> tokenize_template(std::string_view source, const std::string& name);

}  // namespace ferry::jinja
