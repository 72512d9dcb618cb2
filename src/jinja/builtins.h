// The operations a Jinja template performs on values, with the semantics of jinja2's
// ImmutableSandboxedEnvironment running on Python objects: attribute and item lookup (with
// jinja's fallback from one to the other), operators, iteration, builtin filters and tests, the
// methods of str / dict / list that templates call, and the globals range / dict / namespace.
//
// What jinja2 offers but ferry does not implement (Markup escaping, printf-style `%`, str.format,
// Unicode case mapping, a few rare filters) throws TemplateError naming it; nothing is guessed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace ferry::jinja {

// Throws TemplateError with the undefined value's description ("'foo' is undefined").
[[noreturn]] void undefined_error(const Value& undefined);

// obj.name: attribute (methods of str/dict/list, namespace and loop attributes), else item.
Value get_attribute(const Value& object, const std::string& name);
// obj[key]: item, else (for string keys) attribute; Undefined when neither exists.
Value get_item(const Value& object, const Value& key);
// obj[start:stop:step]
Value get_slice(const Value& object, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                const std::optional<int64_t>& step);

// + - * / // % ** on values.
Value binary_operation(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
// "eq" "ne" "lt" "lteq" "gt" "gteq" "in" "notin"
bool compare(const std::string& op, const Value& a, const Value& b);
// The items `for x in value` visits: list items, dict keys, string characters; Undefined is empty.
std::vector<Value> iterate(const Value& value);
// len(value)
int64_t length_of(const Value& value);

Value call_value(const Value& callee, CallArgs& args);
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

// jinja2's global functions: range, dict, namespace (lipsum, cycler and joiner are not provided).
std::vector<std::pair<std::string, Value>> jinja_globals();

}  // namespace ferry::jinja
