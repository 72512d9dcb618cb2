// The Jinja parser: tokens → syntax tree, following jinja2's grammar and operator precedence
// (jinja2/parser.py): conditional expressions, or/and/not, comparisons (chained, `in`, `not in`),
// + -, ~, * / // %, **, unary - +, then postfix (.attr, [index], [slices], calls), filters
// (`|f(args)`) and tests (`is [not] t(args)`).
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (name, tuple, namespace
// attribute, block form), macro, break/continue (jinja2.ext.loopcontrols, which transformers
// enables) and transformers' {% generation %}. Everything else jinja2 knows (include, import,
// extends, block, call, filter, with, autoescape, do, raw) is an error naming the tag and line.
#pragma once

#include <string>
#include <string_view>

#include "jinja/ast.h"

namespace ferry::jinja {

struct ParsedTemplate {
  std::string name;
  Body body;
};

// Throws ferry::Error ("[jinja] NAME:LINE: ...") on a syntax error or an unsupported construct.
ParsedTemplate parse_template(std::string_view source, const std::string& name);

// Whether jinja2 has a builtin filter / test of this name (an unknown name is a template error).
bool is_jinja_filter(const std::string& name);
bool is_jinja_test(const std::string& name);

}  // namespace ferry::jinja
