#include "jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "jinja/error.h"
#include "jinja/pystr.h"

namespace ferry::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find_name(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v(Kind::List);
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  v.list_->tuple = tuple;
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<DictData>();
  for (auto& [k, val] : items) v.dict_->set(k, std::move(val));
  return v;
}

Value Value::namespace_object(std::vector<std::pair<Value, Value>> attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::object(std::vector<std::pair<Value, Value>> attributes) {
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::Object;
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  Value v(Kind::Function);
  v.function_ = std::make_shared<FunctionData>();
  v.function_->name = std::move(name);
  v.function_->call = std::move(call);
  return v;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::Bool:
      return bool_ ? 1.0 : 0.0;
    case Kind::Int:
      return static_cast<double>(int_);
    case Kind::Float:
      return float_;
    default:
      throw TemplateError(fmt::format("expected a number, got {}", type_name()));
  }
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::List:
      return list_.get();
    case Kind::Dict:
    case Kind::Namespace:
    case Kind::Object:
      return dict_.get();
    case Kind::Function:
      return function_.get();
    default:
      return nullptr;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return bool_;
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0.0;
    case Kind::String:
      return !str_.empty();
    case Kind::List:
      return !list_->items.empty();
    case Kind::Dict:
      return !dict_->items.empty();
    default:
      return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return list_->tuple ? "tuple" : "list";
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Object:
      return "LoopContext";
    case Kind::Function:
      return "function";
  }
  return "object";
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::Undefined:
      return "";
    case Kind::String:
      return str_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return bool_ ? "True" : "False";
    case Kind::Int:
      return std::to_string(int_);
    case Kind::Float:
      return py_float_repr(float_);
    case Kind::String:
      return py_repr(str_);
    case Kind::List: {
      std::string out = list_->tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i) out += ", ";
        out += list_->items[i].repr();
      }
      if (list_->tuple && list_->items.size() == 1) out += ",";
      out += list_->tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += dict_->items[i].first.repr() + ": " + dict_->items[i].second.repr();
      }
      out += "}";
      return kind_ == Kind::Namespace ? "<Namespace " + out + ">" : out;
    }
    case Kind::Object:
    case Kind::Function:
      throw TemplateError(
          fmt::format("printing a {} object is not supported (Python would print its address)", type_name()));
  }
  return "";
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.as_string() == b.as_string();
    case Kind::List: {
      const auto& x = a.list_data();
      const auto& y = b.list_data();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const auto& x = a.dict_data();
      const auto& y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is Python's str order.
    return a.as_string() < b.as_string();
  }
  if (a.is_list() && b.is_list() && a.list_data().tuple == b.list_data().tuple) {
    const auto& x = a.list_data().items;
    const auto& y = b.list_data().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) throw TemplateError("cannot compare an undefined value");
  throw TemplateError(
      fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) throw TemplateError("integer too large");
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [k, v] : json.items()) items.emplace_back(Value(k), from_json(v));
      return Value::dict(std::move(items));
    }
    default:
      throw TemplateError("unsupported JSON value");
  }
}

namespace {

void json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out.push_back('"');
  if (!ensure_ascii) {
    for (char ch : text) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20)
            out += fmt::format("\\u{:04x}", c);
          else
            out.push_back(ch);
      }
    }
  } else {
    for (char32_t c : utf8_decode(text)) {
      switch (c) {
        case U'"':
          out += "\\\"";
          break;
        case U'\\':
          out += "\\\\";
          break;
        case U'\n':
          out += "\\n";
          break;
        case U'\r':
          out += "\\r";
          break;
        case U'\t':
          out += "\\t";
          break;
        case U'\b':
          out += "\\b";
          break;
        case U'\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || (c >= 0x7F && c <= 0xFFFF && c != 0x7F)) {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          } else if (c == 0x7F) {
            out.push_back(static_cast<char>(c));
          } else if (c > 0xFFFF) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(v);
}

// A dict key as json.dumps turns it into a string.
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Kind::String:
      return key.as_string();
    case Kind::Bool:
      return key.as_bool() ? "true" : "false";
    case Kind::Int:
      return std::to_string(key.as_int());
    case Kind::Float:
      return json_float(key.as_double());
    case Kind::None:
      return "null";
    default:
      throw TemplateError(fmt::format("keys must be str, int, float, bool or None, not {}", key.type_name()));
  }
}

void dump(std::string& out, const Value& value, const JsonDumpOptions& o, int depth) {
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (value.kind()) {
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(value.as_int());
      return;
    case Kind::Float:
      out += json_float(value.as_double());
      return;
    case Kind::String:
      json_string(out, value.as_string(), o.ensure_ascii);
      return;
    case Kind::List: {
      const auto& items = value.list_data().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent) newline(depth + 1);
        dump(out, items[i], o, depth + 1);
      }
      if (o.indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Kind::Dict: {
      auto items = value.dict_data().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, v] : items) entries.emplace_back(json_key(k), &v);
      if (o.sort_keys) {
        for (const auto& [k, v] : items)
          if (!k.is_string()) throw TemplateError("tojson(sort_keys=true) needs string keys");
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent) newline(depth + 1);
        json_string(out, entries[i].first, o.ensure_ascii);
        out += key_sep;
        dump(out, *entries[i].second, o, depth + 1);
      }
      if (o.indent) newline(depth);
      out.push_back('}');
      return;
    }
    default:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", value.type_name()));
  }
}

}  // namespace

std::string to_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump(out, value, options, 0);
  return out;
}

}  // namespace ferry::jinja
