// Values of the Jinja interpreter, with Python's semantics (templates run on Python objects in
// transformers, so equality, truthiness, printing and JSON must be Python's).
//
// Lists and dicts are shared by reference, as in Python: a message dict taken out of `messages`
// is the same object as the list's element, which lets the chat template renderer tell which
// message a piece of output belongs to (see chat_template.h). Dicts keep insertion order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ferry::jinja {

class Value;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) and is immutable
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order

  const Value* find(const Value& key) const;
  const Value* find_name(std::string_view key) const;
  void set(const Value& key, Value value);
};

// Arguments of a call: positional, then name=value.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct FunctionData {
  std::string name;  // for messages: "raise_exception", "str.split", "macro foo"
  std::function<Value(CallArgs&)> call;
};

enum class Kind : uint8_t {
  Undefined,
  None,
  Bool,
  Int,
  Float,
  String,
  List,  // list or tuple
  Dict,
  Namespace,  // jinja's namespace(): attributes, assignable with {% set ns.x = ... %}
  Object,     // read-only attributes (the `loop` variable)
  Function,
};

class Value {
 public:
  Value() = default;  // Undefined
  static Value undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), bool_(b) {}
  Value(int v) : kind_(Kind::Int), int_(v) {}
  Value(int64_t v) : kind_(Kind::Int), int_(v) {}
  Value(double v) : kind_(Kind::Float), float_(v) {}
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), str_(s) {}
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict(std::vector<std::pair<Value, Value>> items = {});
  static Value namespace_object(std::vector<std::pair<Value, Value>> attributes = {});
  static Value object(std::vector<std::pair<Value, Value>> attributes);
  static Value function(std::string name, std::function<Value(CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (bool_ ? 1 : 0) : int_; }  // Bool or Int
  double as_double() const;                                                        // any number
  const std::string& as_string() const { return str_; }
  const std::string& undefined_hint() const { return str_; }
  ListData& list_data() const { return *list_; }
  DictData& dict_data() const { return *dict_; }
  FunctionData& function_data() const { return *function_; }
  // Identity of a list/dict/namespace object (Python's `is`), or nullptr.
  const void* identity() const;

  // Python's bool(value).
  bool truthy() const;
  // Python's str(value) as Jinja prints it ({{ value }}): Undefined prints as "".
  std::string to_str() const;
  // Python's repr(value).
  std::string repr() const;
  // Python's type name: "str", "int", "list", "dict", "NoneType", ...
  std::string type_name() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::Undefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;  // String; Undefined: a description of what was undefined
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;  // Dict, Namespace, Object
  std::shared_ptr<FunctionData> function_;
};

// Python's ==.
bool py_equal(const Value& a, const Value& b);
// Python's <; throws TemplateError for unorderable types ("'<' not supported between ...").
bool py_less(const Value& a, const Value& b);

// A JSON document (insertion-ordered, as Python's json.loads reads it) as a value.
Value from_json(const nlohmann::ordered_json& json);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter
// calls it. indent: nullopt for none, else the indent string (an integer n means n spaces).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonDumpOptions& options);

}  // namespace ferry::jinja
