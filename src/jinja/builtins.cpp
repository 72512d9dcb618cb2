#include "jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfenv>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "jinja/error.h"
#include "jinja/parser.h"
#include "jinja/pystr.h"

namespace ferry::jinja {

void undefined_error(const Value& undefined) {
  throw TemplateError(undefined.undefined_hint().empty() ? std::string("a value is undefined")
                                                         : undefined.undefined_hint());
}

namespace {

// ---- argument binding (Python's rules for name=value and defaults) ----

struct Param {
  const char* name;
  std::optional<Value> fallback;  // nullopt: required
};

std::vector<Value> bind(const std::string& function, CallArgs& args, std::initializer_list<Param> params) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.positional.size() > params.size())
    throw TemplateError(fmt::format("{}() takes at most {} argument(s) ({} given)", function, params.size(),
                                    args.positional.size()));
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    size_t index = 0;
    for (const Param& p : params) {
      if (key == p.name) break;
      ++index;
    }
    if (index == params.size())
      throw TemplateError(fmt::format("{}() got an unexpected keyword argument '{}'", function, key));
    if (bound[index])
      throw TemplateError(fmt::format("{}() got multiple values for argument '{}'", function, key));
    bound[index] = value;
  }
  std::vector<Value> out;
  size_t index = 0;
  for (const Param& p : params) {
    if (bound[index]) {
      out.push_back(*bound[index]);
    } else if (p.fallback) {
      out.push_back(*p.fallback);
    } else {
      throw TemplateError(fmt::format("{}() missing required argument '{}'", function, p.name));
    }
    ++index;
  }
  return out;
}

void no_args(const std::string& function, CallArgs& args) {
  bind(function, args, {});
}

const std::string& require_string(const Value& v, const std::string& what) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) throw TemplateError(fmt::format("{} must be a string, not {}", what, v.type_name()));
  return v.as_string();
}

int64_t require_int(const Value& v, const std::string& what) {
  if (v.is_undefined()) undefined_error(v);
  if (v.kind() != Kind::Int && v.kind() != Kind::Bool)
    throw TemplateError(fmt::format("{} must be an integer, not {}", what, v.type_name()));
  return v.as_int();
}

std::optional<int64_t> optional_int(const Value& v, const std::string& what) {
  if (v.is_none()) return std::nullopt;
  return require_int(v, what);
}

std::optional<std::string> optional_chars(const Value& v, const std::string& what) {
  if (v.is_none()) return std::nullopt;
  return require_string(v, what);
}

// jinja's soft_str: str() of anything, "" for Undefined.
std::string soft_str(const Value& v) {
  return v.to_str();
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

// The prefixes of startswith/endswith: a string or a tuple of strings.
std::vector<std::string> affixes(const Value& v, const std::string& method) {
  if (v.is_string()) return {v.as_string()};
  if (v.is_list() && v.list_data().tuple) {
    std::vector<std::string> out;
    for (const auto& item : v.list_data().items)
      out.push_back(require_string(item, method + "() tuple item"));
    return out;
  }
  throw TemplateError(
      fmt::format("{} first arg must be str or a tuple of str, not {}", method, v.type_name()));
}

// text[start:end] in code points, for startswith/endswith/find/count's optional bounds.
std::string bounded(const std::string& text, const Value& start, const Value& end) {
  if (start.is_none() && end.is_none()) return text;
  return py_slice(text, optional_int(start, "start"), optional_int(end, "end"), std::nullopt);
}

// Code-point index of a byte offset in valid UTF-8 text.
int64_t code_point_index(const std::string& text, size_t byte_offset) {
  return py_len(std::string_view(text).substr(0, byte_offset));
}

Value str_method(const std::string& s, const std::string& name) {
  const std::string full = "str." + name;
  auto make = [&](std::function<Value(CallArgs&)> f) { return Value::function(full, std::move(f)); };
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return make([s, full, starts](CallArgs& a) {
      auto v = bind(full, a, {{"prefix", {}}, {"start", Value::none()}, {"end", Value::none()}});
      const std::string text = bounded(s, v[1], v[2]);
      for (const auto& affix : affixes(v[0], full)) {
        if (starts ? text.compare(0, affix.size(), affix) == 0 && text.size() >= affix.size()
                   : text.size() >= affix.size() &&
                         text.compare(text.size() - affix.size(), affix.size(), affix) == 0)
          return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return make([s, full, left, right](CallArgs& a) {
      auto v = bind(full, a, {{"chars", Value::none()}});
      return Value(py_strip(s, optional_chars(v[0], full + "() chars"), left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return make([s, full, from_right](CallArgs& a) {
      auto v = bind(full, a, {{"sep", Value::none()}, {"maxsplit", Value(-1)}});
      return string_list(
          py_split(s, optional_chars(v[0], full + "() sep"), require_int(v[1], "maxsplit"), from_right));
    });
  }
  if (name == "splitlines") {
    return make([s, full](CallArgs& a) {
      auto v = bind(full, a, {{"keepends", Value(false)}});
      if (v[0].truthy()) throw TemplateError("str.splitlines(keepends=True) is not supported");
      return string_list(py_splitlines(s));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return make([s, full, name](CallArgs& a) {
      no_args(full, a);
      if (name == "upper") return Value(py_upper(s));
      if (name == "lower") return Value(py_lower(s));
      if (name == "title") return Value(py_title(s));
      return Value(py_capitalize(s));
    });
  }
  if (name == "replace") {
    return make([s, full](CallArgs& a) {
      auto v = bind(full, a, {{"old", {}}, {"new", {}}, {"count", Value(-1)}});
      return Value(py_replace(s, require_string(v[0], "old"), require_string(v[1], "new"),
                              require_int(v[2], "count")));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    return make([s, full, name](CallArgs& a) {
      auto v = bind(full, a, {{"sub", {}}, {"start", Value::none()}, {"end", Value::none()}});
      if (!v[1].is_none() || !v[2].is_none())
        throw TemplateError(full + "() with start/end is not supported");
      const std::string& sub = require_string(v[0], "sub");
      const size_t hit = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (hit == std::string::npos) {
        if (name == "index" || name == "rindex") throw TemplateError("substring not found");
        return Value(-1);
      }
      return Value(code_point_index(s, hit));
    });
  }
  if (name == "count") {
    return make([s, full](CallArgs& a) {
      auto v = bind(full, a, {{"sub", {}}, {"start", Value::none()}, {"end", Value::none()}});
      const std::string text = bounded(s, v[1], v[2]);
      const std::string& sub = require_string(v[0], "sub");
      if (sub.empty()) return Value(py_len(text) + 1);
      int64_t n = 0;
      for (size_t pos = text.find(sub); pos != std::string::npos; pos = text.find(sub, pos + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return make([s, full](CallArgs& a) {
      auto v = bind(full, a, {{"iterable", {}}});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v[0])) {
        if (!item.is_string())
          throw TemplateError(
              fmt::format("sequence item: expected str instance, {} found", item.type_name()));
        if (!first) out += s;
        out += item.as_string();
        first = false;
      }
      return Value(out);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return make([s, full, prefix](CallArgs& a) {
      auto v = bind(full, a, {{"affix", {}}});
      const std::string& x = require_string(v[0], "affix");
      if (prefix && s.compare(0, x.size(), x) == 0 && s.size() >= x.size()) return Value(s.substr(x.size()));
      if (!prefix && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
      return Value(s);
    });
  }
  if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isupper" ||
      name == "islower") {
    return make([s, full, name](CallArgs& a) {
      no_args(full, a);
      if (name == "isspace") {
        const std::u32string cps = utf8_decode(s);
        return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), py_isspace));
      }
      if (!is_ascii(s)) throw TemplateError(full + "() of non-ASCII text is not supported");
      auto all = [&](auto pred) { return !s.empty() && std::all_of(s.begin(), s.end(), pred); };
      auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
      auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
      auto digit = [](char c) { return c >= '0' && c <= '9'; };
      if (name == "isdigit") return Value(all(digit));
      if (name == "isalpha") return Value(all([&](char c) { return lower(c) || upper(c); }));
      if (name == "isalnum") return Value(all([&](char c) { return lower(c) || upper(c) || digit(c); }));
      const bool any_upper = std::any_of(s.begin(), s.end(), upper);
      const bool any_lower = std::any_of(s.begin(), s.end(), lower);
      return Value(name == "isupper" ? any_upper && !any_lower : any_lower && !any_upper);
    });
  }
  if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
    return make([s, full, name](CallArgs& a) {
      auto v = name == "zfill" ? bind(full, a, {{"width", {}}})
                               : bind(full, a, {{"width", {}}, {"fillchar", Value(" ")}});
      const int64_t width = require_int(v[0], "width"), len = py_len(s);
      const std::string fill = name == "zfill" ? "0" : require_string(v[1], "fillchar");
      if (py_len(fill) != 1) throw TemplateError("The fill character must be exactly one character long");
      if (len >= width) return Value(s);
      const int64_t pad = width - len;
      int64_t left = name == "rjust" || name == "zfill" ? pad
                     : name == "ljust"                  ? 0
                                                        : pad / 2 + (pad & width & 1);
      auto repeat = [&](int64_t k) {
        std::string out;
        for (int64_t i = 0; i < k; ++i) out += fill;
        return out;
      };
      if (name == "zfill" && !s.empty() && (s[0] == '+' || s[0] == '-'))
        return Value(s.substr(0, 1) + repeat(left) + s.substr(1));
      return Value(repeat(left) + s + repeat(pad - left));
    });
  }
  static const std::set<std::string> others = {"casefold",   "encode",      "expandtabs", "format",
                                               "format_map", "isascii",     "isdecimal",  "isidentifier",
                                               "isnumeric",  "isprintable", "istitle",    "maketrans",
                                               "partition",  "rpartition",  "swapcase",   "translate"};
  if (others.count(name)) {
    return make([full](CallArgs&) -> Value {
      throw TemplateError(full + "() is not supported by ferry's Jinja interpreter");
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

Value dict_method(const Value& d, const std::string& name) {
  const std::string full = "dict." + name;
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(full, [d, full, name](CallArgs& a) {
      no_args(full, a);
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) {
        if (name == "items")
          out.push_back(Value::list({k, v}, true));
        else
          out.push_back(name == "keys" ? k : v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function(full, [d, full](CallArgs& a) {
      auto v = bind(full, a, {{"key", {}}, {"default", Value::none()}});
      const Value* hit = d.dict_data().find(v[0]);
      return hit ? *hit : v[1];
    });
  }
  if (name == "copy") {
    return Value::function(full, [d, full](CallArgs& a) {
      no_args(full, a);
      return Value::dict(d.dict_data().items);
    });
  }
  static const std::set<std::string> mutating = {"clear", "pop", "popitem", "setdefault", "update"};
  if (mutating.count(name) || name == "fromkeys") {
    return Value::function(full, [name](CallArgs&) -> Value {
      throw TemplateError(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name));
    });
  }
  return Value();  // not a method: the caller looks the key up
}

Value list_method(const Value& l, const std::string& name) {
  const std::string full = (l.list_data().tuple ? "tuple." : "list.") + name;
  if (name == "index" || name == "count") {
    return Value::function(full, [l, full, name](CallArgs& a) {
      auto v = bind(full, a, {{"value", {}}});
      int64_t count = 0;
      const auto& items = l.list_data().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!py_equal(items[i], v[0])) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") throw TemplateError(fmt::format("{} is not in list", v[0].repr()));
      return Value(count);
    });
  }
  if (name == "copy" && !l.list_data().tuple) {
    return Value::function(full, [l, full](CallArgs& a) {
      no_args(full, a);
      return Value::list(l.list_data().items);
    });
  }
  static const std::set<std::string> mutating = {"append", "clear",  "extend",  "insert",
                                                 "pop",    "remove", "reverse", "sort"};
  if (mutating.count(name) && !l.list_data().tuple) {
    return Value::function(full, [name](CallArgs&) -> Value {
      throw TemplateError(fmt::format("access to attribute '{}' of 'list' object is unsafe.", name));
    });
  }
  return Value();
}

std::string object_name(const Value& v) {
  return fmt::format("'{} object'", v.type_name());
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Kind::Undefined:
      undefined_error(object);
    case Kind::String:
      return str_method(object.as_string(), name);
    case Kind::Dict: {
      Value method = dict_method(object, name);
      if (!method.is_undefined()) return method;
      if (const Value* hit = object.dict_data().find_name(name)) return *hit;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Kind::List: {
      Value method = list_method(object, name);
      if (!method.is_undefined()) return method;
      return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(object), name));
    }
    case Kind::Namespace:
    case Kind::Object:
      if (const Value* hit = object.dict_data().find_name(name)) return *hit;
      return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(object), name));
    case Kind::Int:
    case Kind::Float:
    case Kind::Bool: {
      static const std::set<std::string> number_attributes = {
          "real",     "imag",       "numerator",        "denominator", "conjugate", "bit_length", "bit_count",
          "to_bytes", "from_bytes", "as_integer_ratio", "is_integer",  "hex",       "fromhex"};
      if (number_attributes.count(name))
        throw TemplateError(
            fmt::format("{}.{} is not supported by ferry's Jinja interpreter", object.type_name(), name));
      return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(object), name));
    }
    default:
      return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(object), name));
  }
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Kind::Undefined:
      undefined_error(object);
    case Kind::List:
    case Kind::String: {
      if (key.kind() == Kind::Int || key.kind() == Kind::Bool) {
        const int64_t n = length_of(object);
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n)
          return Value::undefined(fmt::format("{} has no element {}", object_name(object), key.repr()));
        if (object.is_list()) return object.list_data().items[static_cast<size_t>(i)];
        return Value(py_slice(object.as_string(), i, i + 1, std::nullopt));
      }
      break;
    }
    case Kind::Dict:
      if (const Value* hit = object.dict_data().find(key)) return *hit;
      break;
    default:
      break;
  }
  // jinja: when item lookup fails and the key is a string, try it as an attribute.
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_name(object), key.repr()));
}

Value get_slice(const Value& object, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                const std::optional<int64_t>& step) {
  if (object.is_undefined()) undefined_error(object);
  if (object.is_string()) return Value(py_slice(object.as_string(), start, stop, step));
  if (object.is_list()) {
    const auto& items = object.list_data().items;
    std::vector<Value> out;
    for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step))
      out.push_back(items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), object.list_data().tuple);
  }
  return Value::undefined(fmt::format("{} cannot be sliced", object_name(object)));
}

namespace {

[[noreturn]] void unsupported_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "+" && a.is_string())
    throw TemplateError(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
  if (op == "+" && a.is_list() && !a.list_data().tuple)
    throw TemplateError(fmt::format("can only concatenate list (not \"{}\") to list", b.type_name()));
  throw TemplateError(
      fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

[[noreturn]] void overflow() {
  throw TemplateError("integer overflow (values beyond 64 bits are not supported)");
}

Value repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.list_data().items.begin(), seq.list_data().items.end());
  return Value::list(std::move(out), seq.list_data().tuple);
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_operation(const std::string& op, const Value& a, const Value& b) {
  const bool ints = (a.kind() == Kind::Int || a.is_bool()) && (b.kind() == Kind::Int || b.is_bool());
  const bool numbers = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value(r);
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.list_data().tuple == b.list_data().tuple) {
      std::vector<Value> out = a.list_data().items;
      out.insert(out.end(), b.list_data().items.begin(), b.list_data().items.end());
      return Value::list(std::move(out), a.list_data().tuple);
    }
  } else if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value(r);
    }
    if (numbers) return Value(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value(r);
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && (b.kind() == Kind::Int || b.is_bool()))
      return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.kind() == Kind::Int || a.is_bool()))
      return repeat(b, a.as_int());
  } else if (op == "/") {
    if (numbers) {
      if (b.as_double() == 0) throw TemplateError("division by zero");
      return Value(a.as_double() / b.as_double());
    }
  } else if (op == "//") {
    if (ints) {
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    if (numbers) {
      if (b.as_double() == 0) throw TemplateError("float floor division by zero");
      return Value(std::floor(a.as_double() / b.as_double()));
    }
  } else if (op == "%") {
    if (ints) {
      if (b.as_int() == 0) throw TemplateError("integer division or modulo by zero");
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (numbers) {
      if (b.as_double() == 0) throw TemplateError("float modulo");
      return Value(py_fmod(a.as_double(), b.as_double()));
    }
    if (a.is_string()) throw TemplateError("printf-style string formatting (str % value) is not supported");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i)
        if (__builtin_mul_overflow(r, a.as_int(), &r)) overflow();
      return Value(r);
    }
    if (numbers) return Value(std::pow(a.as_double(), b.as_double()));
  }
  unsupported_operands(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) undefined_error(v);
  if (v.kind() == Kind::Int || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) throw TemplateError("integer overflow");
    return Value(-v.as_int());
  }
  if (v.kind() == Kind::Float) return Value(-v.as_double());
  throw TemplateError(fmt::format("bad operand type for unary -: '{}'", v.type_name()));
}

namespace {

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::Undefined:
      return false;  // jinja's Undefined iterates as empty
    case Kind::String:
      if (!item.is_string())
        throw TemplateError(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::List:
      for (const auto& x : container.list_data().items)
        if (py_equal(x, item)) return true;
      return false;
    case Kind::Dict:
      return container.dict_data().find(item) != nullptr;
    default:
      throw TemplateError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

}  // namespace

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "eq") return py_equal(a, b);
  if (op == "ne") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "lt") return py_less(a, b);
  if (op == "gt") return py_less(b, a);
  if (op == "lteq") return py_less(a, b) || py_equal(a, b);
  if (op == "gteq") return py_less(b, a) || py_equal(a, b);
  throw TemplateError("unknown comparison " + op);
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return value.list_data().items;
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& [k, v] : value.dict_data().items) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(value.as_string())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      throw TemplateError(fmt::format("'{}' object is not iterable", value.type_name()));
  }
}

int64_t length_of(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined:
      return 0;
    case Kind::String:
      return py_len(value.as_string());
    case Kind::List:
      return static_cast<int64_t>(value.list_data().items.size());
    case Kind::Dict:
      return static_cast<int64_t>(value.dict_data().items.size());
    default:
      throw TemplateError(fmt::format("object of type '{}' has no len()", value.type_name()));
  }
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) undefined_error(callee);
  if (callee.kind() != Kind::Function)
    throw TemplateError(fmt::format("'{}' object is not callable", callee.type_name()));
  return callee.function_data().call(args);
}

namespace {

// A part of an attribute path that is all digits, as the integer jinja makes of it. jinja2 takes
// any size; ferry's integers are 64-bit (as elsewhere), so a larger one is refused by name.
Value index_part(const std::string& part, const std::string& path) {
  int64_t index = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
  if (ec != std::errc() || end != part.data() + part.size())
    throw TemplateError(fmt::format(
        "attribute '{}': the index {} is beyond 64 bits, which ferry's Jinja interpreter does not support",
        path, part));
  return Value(index);
}

// jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0, each with getitem semantics.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, digits ? index_part(part, path) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  rest.positional.assign(
      args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(skip, args.positional.size())),
      args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

std::vector<Value> select_items(const Value& subject, CallArgs& args, bool select, bool by_attribute,
                                const std::string& filter) {
  std::vector<Value> out;
  if (!subject.truthy()) return out;
  size_t off = 0;
  std::string attr;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError(filter + ": missing parameter for attribute name");
    attr = require_string(args.positional[0], filter + " attribute");
    off = 1;
  }
  std::optional<std::string> test;
  if (args.positional.size() > off) test = require_string(args.positional[off], filter + " test name");
  for (const Value& item : iterate(subject)) {
    const Value x = by_attribute ? attribute_path(item, attr) : item;
    bool ok;
    if (test) {
      CallArgs test_args = rest_args(args, off + 1);
      ok = apply_test(*test, x, test_args);
    } else {
      ok = x.truthy();
    }
    if (ok == select) out.push_back(item);
  }
  return out;
}

std::string jinja_title(const std::string& s) {
  // jinja's do_title: words start after runs of [-\s({\[<]; each word is item[0].upper() + item[1:].lower().
  if (!is_ascii(s)) throw TemplateError("the title filter on non-ASCII text is not supported");
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep =
        c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(static_cast<char32_t>(c));
    if (sep) {
      out.push_back(c);
      word_start = true;
    } else {
      out.push_back(word_start ? (c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c)
                               : (c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c));
      word_start = false;
    }
  }
  return out;
}

Value sort_key(const Value& v, bool case_sensitive, const std::string& attribute) {
  Value k = attribute.empty() ? v : attribute_path(v, attribute);
  if (!case_sensitive && k.is_string()) k = Value(py_lower(k.as_string()));
  return k;
}

Value tojson_filter(const Value& subject, CallArgs& args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  auto v = bind("tojson", args,
                {{"ensure_ascii", Value(false)},
                 {"indent", Value::none()},
                 {"separators", Value::none()},
                 {"sort_keys", Value(false)}});
  JsonDumpOptions o;
  o.ensure_ascii = v[0].truthy();
  if (v[1].is_string()) {
    o.indent = v[1].as_string();
  } else if (!v[1].is_none()) {
    const int64_t n = require_int(v[1], "tojson indent");
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
  }
  if (!v[2].is_none()) {
    if (!v[2].is_list() || v[2].list_data().items.size() != 2)
      throw TemplateError("tojson separators must be a pair (item_separator, key_separator)");
    o.separators = std::make_pair(require_string(v[2].list_data().items[0], "separator"),
                                  require_string(v[2].list_data().items[1], "separator"));
  }
  o.sort_keys = v[3].truthy();
  return Value(to_json(subject, o));
}

Value indent_filter(const Value& subject, CallArgs& args) {
  auto v = bind("indent", args, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
  const std::string indention =
      v[0].is_string()
          ? v[0].as_string()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, require_int(v[0], "width"))), ' ');
  const std::string s = soft_str(subject) + "\n";
  std::vector<std::string> lines = py_splitlines(s);
  std::string rv;
  if (v[2].truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv.append("\n").append(indention);
      rv.append(lines[i]);
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv.append("\n");
      if (!lines[i].empty()) rv.append(indention);
      rv.append(lines[i]);
    }
  }
  if (v[1].truthy()) rv = indention + rv;
  return Value(rv);
}

Value int_filter(const Value& subject, CallArgs& args) {
  auto v = bind("int", args, {{"default", Value(0)}, {"base", Value(10)}});
  if (subject.kind() == Kind::Int || subject.is_bool()) return Value(subject.as_int());
  if (subject.kind() == Kind::Float) {
    if (!std::isfinite(subject.as_double())) return v[0];
    return Value(static_cast<int64_t>(std::trunc(subject.as_double())));
  }
  if (subject.is_string()) {
    const std::string t = py_strip(subject.as_string(), std::nullopt, true, true);
    try {
      size_t used = 0;
      const int64_t base = require_int(v[1], "base");
      const long long n = std::stoll(t, &used, static_cast<int>(base));
      if (used == t.size()) return Value(static_cast<int64_t>(n));
    } catch (const std::exception&) {
    }
    try {
      size_t used = 0;
      const double d = std::stod(t, &used);
      if (used == t.size() && std::isfinite(d)) return Value(static_cast<int64_t>(std::trunc(d)));
    } catch (const std::exception&) {
    }
  }
  return v[0];
}

Value float_filter(const Value& subject, CallArgs& args) {
  auto v = bind("float", args, {{"default", Value(0.0)}});
  if (subject.is_number()) return Value(subject.as_double());
  if (subject.is_string()) {
    const std::string t = py_strip(subject.as_string(), std::nullopt, true, true);
    try {
      size_t used = 0;
      const double d = std::stod(t, &used);
      if (used == t.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return v[0];
}

Value round_filter(const Value& subject, CallArgs& args) {
  auto v = bind("round", args, {{"precision", Value(0)}, {"method", Value("common")}});
  const std::string& method = require_string(v[1], "round method");
  if (require_int(v[0], "precision") != 0) throw TemplateError("round(precision != 0) is not supported");
  const double x = subject.as_double();
  double r;
  if (method == "common") {
    const int saved = std::fegetround();
    std::fesetround(FE_TONEAREST);
    r = std::nearbyint(x);  // Python's round(): half to even
    std::fesetround(saved);
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    throw TemplateError("method must be common, ceil or floor");
  }
  return Value(r);
}

}  // namespace

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  const std::string& f = name;
  if (f == "length" || f == "count") {
    no_args(f, args);
    return Value(length_of(subject));
  }
  if (f == "trim") {
    auto v = bind(f, args, {{"chars", Value::none()}});
    return Value(py_strip(soft_str(subject), optional_chars(v[0], "trim chars"), true, true));
  }
  if (f == "tojson") return tojson_filter(subject, args);
  if (f == "string") {
    no_args(f, args);
    return Value(soft_str(subject));
  }
  if (f == "lower" || f == "upper" || f == "capitalize") {
    no_args(f, args);
    const std::string s = soft_str(subject);
    return Value(f == "lower" ? py_lower(s) : f == "upper" ? py_upper(s) : py_capitalize(s));
  }
  if (f == "title") {
    no_args(f, args);
    return Value(jinja_title(soft_str(subject)));
  }
  if (f == "default" || f == "d") {
    auto v = bind(f, args, {{"default_value", Value("")}, {"boolean", Value(false)}});
    if (subject.is_undefined() || (v[1].truthy() && !subject.truthy())) return v[0];
    return subject;
  }
  if (f == "first" || f == "last") {
    no_args(f, args);
    if (subject.is_undefined()) undefined_error(subject);
    std::vector<Value> items = iterate(subject);
    if (f == "last" && subject.is_dict()) throw TemplateError("'dict' object is not reversible");
    if (items.empty())
      return Value::undefined(f == "first" ? "No first item, sequence was empty."
                                           : "No last item, sequence was empty.");
    return f == "first" ? items.front() : items.back();
  }
  if (f == "join") {
    auto v = bind(f, args, {{"d", Value("")}, {"attribute", Value::none()}});
    std::string out;
    bool first = true;
    for (const Value& item : iterate(subject)) {
      if (!first) out += soft_str(v[0]);
      out += soft_str(v[1].is_none() ? item : attribute_path(item, soft_str(v[1])));
      first = false;
    }
    return Value(out);
  }
  if (f == "replace") {
    auto v = bind(f, args, {{"old", {}}, {"new", {}}, {"count", Value::none()}});
    const int64_t count = v[2].is_none() ? -1 : require_int(v[2], "count");
    return Value(py_replace(soft_str(subject), soft_str(v[0]), soft_str(v[1]), count));
  }
  if (f == "list") {
    no_args(f, args);
    return Value::list(iterate(subject));
  }
  if (f == "items") {
    no_args(f, args);
    if (subject.is_undefined()) return Value::list();
    if (!subject.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : subject.dict_data().items) out.push_back(Value::list({k, v}, true));
    return Value::list(std::move(out));
  }
  if (f == "map") {
    std::vector<Value> out;
    if (!subject.truthy()) return Value::list();
    if (args.positional.empty()) {
      auto v = bind(f, args, {{"attribute", {}}, {"default", Value::none()}});
      const std::string attr = require_string(v[0], "map attribute");
      for (const Value& item : iterate(subject)) {
        Value x = attribute_path(item, attr);
        out.push_back(x.is_undefined() && !v[1].is_none() ? v[1] : x);
      }
    } else {
      const std::string filter = require_string(args.positional[0], "map filter name");
      if (!is_jinja_filter(filter)) throw TemplateError(fmt::format("no filter named '{}'", filter));
      for (const Value& item : iterate(subject)) {
        CallArgs rest = rest_args(args, 1);
        out.push_back(apply_filter(filter, item, rest));
      }
    }
    return Value::list(std::move(out));
  }
  if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr")
    return Value::list(select_items(subject, args, f[0] == 's', f.size() > 6, f));
  if (f == "reverse") {
    no_args(f, args);
    if (subject.is_string()) return Value(py_slice(subject.as_string(), std::nullopt, std::nullopt, -1));
    std::vector<Value> items = iterate(subject);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (f == "sort") {
    auto v = bind(
        f, args, {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value::none()}});
    std::vector<Value> items = iterate(subject);
    const bool cs = v[1].truthy();
    const std::string attr = v[2].is_none() ? "" : soft_str(v[2]);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return py_less(sort_key(a, cs, attr), sort_key(b, cs, attr));
    });
    if (v[0].truthy()) {
      // Python's sorted(reverse=True) keeps equal items in their original order.
      std::vector<Value> rev = iterate(subject);
      std::stable_sort(rev.begin(), rev.end(), [&](const Value& a, const Value& b) {
        return py_less(sort_key(b, cs, attr), sort_key(a, cs, attr));
      });
      items = std::move(rev);
    }
    return Value::list(std::move(items));
  }
  if (f == "unique") {
    auto v = bind(f, args, {{"case_sensitive", Value(false)}, {"attribute", Value::none()}});
    const std::string attr = v[1].is_none() ? "" : soft_str(v[1]);
    std::vector<Value> out, seen;
    for (const Value& item : iterate(subject)) {
      const Value key = sort_key(item, v[0].truthy(), attr);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (f == "min" || f == "max") {
    auto v = bind(f, args, {{"case_sensitive", Value(false)}, {"attribute", Value::none()}});
    const std::string attr = v[1].is_none() ? "" : soft_str(v[1]);
    std::vector<Value> items = iterate(subject);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    Value best = items[0];
    for (size_t i = 1; i < items.size(); ++i) {
      const Value a = sort_key(items[i], v[0].truthy(), attr), b = sort_key(best, v[0].truthy(), attr);
      if (f == "min" ? py_less(a, b) : py_less(b, a)) best = items[i];
    }
    return best;
  }
  if (f == "sum") {
    auto v = bind(f, args, {{"attribute", Value::none()}, {"start", Value(0)}});
    Value total = v[1];
    for (const Value& item : iterate(subject))
      total = binary_operation("+", total, v[0].is_none() ? item : attribute_path(item, soft_str(v[0])));
    return total;
  }
  if (f == "abs") {
    no_args(f, args);
    if (subject.kind() == Kind::Float) return Value(std::fabs(subject.as_double()));
    if (subject.kind() == Kind::Int || subject.is_bool()) {
      const int64_t x = subject.as_int();
      return x < 0 ? negate(subject) : Value(x);
    }
    throw TemplateError(fmt::format("bad operand type for abs(): '{}'", subject.type_name()));
  }
  if (f == "dictsort") {
    auto v =
        bind(f, args, {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
    if (!subject.is_dict()) throw TemplateError("You can only sort by either \"key\" or \"value\" of a dict");
    const std::string by = require_string(v[1], "by");
    if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
    std::vector<Value> pairs;
    for (const auto& [k, val] : subject.dict_data().items) pairs.push_back(Value::list({k, val}, true));
    const size_t pos = by == "key" ? 0 : 1;
    const bool cs = v[0].truthy(), reverse = v[2].truthy();
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
      const Value x = sort_key(a.list_data().items[pos], cs, ""),
                  y = sort_key(b.list_data().items[pos], cs, "");
      return reverse ? py_less(y, x) : py_less(x, y);
    });
    return Value::list(std::move(pairs));
  }
  if (f == "int") return int_filter(subject, args);
  if (f == "float") return float_filter(subject, args);
  if (f == "round") return round_filter(subject, args);
  if (f == "indent") return indent_filter(subject, args);
  if (f == "attr") {
    auto v = bind(f, args, {{"name", {}}});
    const std::string attr = require_string(v[0], "attr name");
    // do_attr uses getattr only: dict keys are not attributes.
    if (subject.is_dict()) {
      Value method = dict_method(subject, attr);
      return method.is_undefined()
                 ? Value::undefined(fmt::format("'dict object' has no attribute '{}'", attr))
                 : method;
    }
    return get_attribute(subject, attr);
  }
  if (f == "wordcount") {
    no_args(f, args);
    // jinja counts matches of \w+; for ASCII text that is runs of [A-Za-z0-9_].
    const std::string s = soft_str(subject);
    if (!is_ascii(s)) throw TemplateError("the wordcount filter on non-ASCII text is not supported");
    int64_t n = 0;
    bool in_word = false;
    for (char c : s) {
      const bool w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (f == "center") {
    auto v = bind(f, args, {{"width", Value(80)}});
    const std::string s = soft_str(subject);
    const int64_t width = require_int(v[0], "width"), len = py_len(s);
    if (len >= width) return Value(s);
    // Python's str.center puts the extra space on the right when the padding is odd, unless the
    // string length is odd too.
    const int64_t pad = width - len;
    const int64_t left = pad / 2 + (pad & width & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s +
                 std::string(static_cast<size_t>(pad - left), ' '));
  }
  throw TemplateError(fmt::format("the '{}' filter is not supported by ferry's Jinja interpreter", f));
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  const std::string& t = name;
  auto one_arg = [&]() { return bind(t, args, {{"other", {}}})[0]; };
  if (t == "defined") return no_args(t, args), !v.is_undefined();
  if (t == "undefined") return no_args(t, args), v.is_undefined();
  if (t == "none") return no_args(t, args), v.is_none();
  if (t == "string") return no_args(t, args), v.is_string();
  if (t == "mapping") return no_args(t, args), v.is_dict();
  if (t == "number") return no_args(t, args), v.is_number();
  if (t == "integer") return no_args(t, args), v.kind() == Kind::Int;
  if (t == "float") return no_args(t, args), v.kind() == Kind::Float;
  if (t == "boolean") return no_args(t, args), v.is_bool();
  if (t == "true") return no_args(t, args), v.is_bool() && v.as_bool();
  if (t == "false") return no_args(t, args), v.is_bool() && !v.as_bool();
  if (t == "escaped") return no_args(t, args), false;
  // Python: str, list, tuple, dict and jinja's Undefined are iterable; Undefined and dict are sequences
  // too (they have __len__ and __getitem__).
  if (t == "iterable")
    return no_args(t, args), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "sequence")
    return no_args(t, args), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "callable") return no_args(t, args), v.kind() == Kind::Function || v.is_undefined();
  if (t == "odd" || t == "even") {
    no_args(t, args);
    const int64_t x = require_int(v, "value");
    return ((x % 2) != 0) == (t == "odd");
  }
  if (t == "divisibleby") {
    const int64_t n = require_int(one_arg(), "divisibleby argument");
    if (n == 0) throw TemplateError("integer division or modulo by zero");
    return require_int(v, "value") % n == 0;
  }
  if (t == "lower" || t == "upper") {
    no_args(t, args);
    const std::string s = soft_str(v);
    CallArgs none;
    return get_attribute(Value(s), t == "lower" ? "islower" : "isupper").function_data().call(none).truthy();
  }
  if (t == "sameas") {
    const Value other = one_arg();
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return v.is_none();
    if (v.is_bool()) return v.as_bool() == other.as_bool();
    if (v.identity()) return v.identity() == other.identity();
    throw TemplateError("the sameas test on strings and numbers depends on Python object identity; use ==");
  }
  if (t == "==" || t == "eq" || t == "equalto") return compare("eq", v, one_arg());
  if (t == "!=" || t == "ne") return compare("ne", v, one_arg());
  if (t == "<" || t == "lt" || t == "lessthan") return compare("lt", v, one_arg());
  if (t == "<=" || t == "le") return compare("lteq", v, one_arg());
  if (t == ">" || t == "gt" || t == "greaterthan") return compare("gt", v, one_arg());
  if (t == ">=" || t == "ge") return compare("gteq", v, one_arg());
  if (t == "in") return compare("in", v, one_arg());
  if (t == "filter") return no_args(t, args), v.is_string() && is_jinja_filter(v.as_string());
  if (t == "test") return no_args(t, args), v.is_string() && is_jinja_test(v.as_string());
  throw TemplateError(fmt::format("the '{}' test is not supported by ferry's Jinja interpreter", t));
}

std::vector<std::pair<std::string, Value>> jinja_globals() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back(
      "range", Value::function("range", [](CallArgs& a) {
        if (!a.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
        if (a.positional.empty() || a.positional.size() > 3)
          throw TemplateError("range expected 1 to 3 arguments");
        int64_t start = 0, stop, step = 1;
        if (a.positional.size() == 1) {
          stop = require_int(a.positional[0], "range argument");
        } else {
          start = require_int(a.positional[0], "range argument");
          stop = require_int(a.positional[1], "range argument");
          if (a.positional.size() == 3) step = require_int(a.positional[2], "range argument");
        }
        if (step == 0) throw TemplateError("range() arg 3 must not be zero");
        std::vector<Value> out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          out.emplace_back(i);
          if (out.size() > 100000)
            throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        return Value::list(std::move(out));
      }));
  g.emplace_back("dict", Value::function("dict", [](CallArgs& a) {
                   if (!a.positional.empty())
                     throw TemplateError("dict() with positional arguments is not supported");
                   std::vector<std::pair<Value, Value>> items;
                   for (auto& [k, v] : a.keyword) items.emplace_back(Value(k), v);
                   return Value::dict(std::move(items));
                 }));
  g.emplace_back("namespace", Value::function("namespace", [](CallArgs& a) {
                   std::vector<std::pair<Value, Value>> items;
                   if (a.positional.size() > 1)
                     throw TemplateError("namespace() takes at most one positional argument");
                   if (a.positional.size() == 1) {
                     if (!a.positional[0].is_dict())
                       throw TemplateError("namespace() positional argument must be a dict");
                     items = a.positional[0].dict_data().items;
                   }
                   for (auto& [k, v] : a.keyword) items.emplace_back(Value(k), v);
                   return Value::namespace_object(std::move(items));
                 }));
  return g;
}

}  // namespace ferry::jinja
