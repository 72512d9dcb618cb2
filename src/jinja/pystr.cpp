#include "jinja/pystr.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/utf8.h"
#include "jinja/error.h"

namespace ferry::jinja {

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c0 = static_cast<unsigned char>(text[i]);
    char32_t cp;
    size_t n;
    if (c0 < 0x80) {
      cp = c0;
      n = 1;
    } else if ((c0 & 0xE0) == 0xC0) {
      cp = c0 & 0x1F;
      n = 2;
    } else if ((c0 & 0xF0) == 0xE0) {
      cp = c0 & 0x0F;
      n = 3;
    } else if ((c0 & 0xF8) == 0xF0) {
      cp = c0 & 0x07;
      n = 4;
    } else {
      throw TemplateError(fmt::format("text is not valid UTF-8 (byte 0x{:02x} at offset {})", c0, i));
    }
    if (i + n > text.size())
      throw TemplateError(fmt::format("text is not valid UTF-8 (truncated at offset {})", i));
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80)
        throw TemplateError(fmt::format("text is not valid UTF-8 (byte 0x{:02x} at offset {})", c, i + k));
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      throw TemplateError(fmt::format("text is not valid UTF-8 (bad sequence at offset {})", i));
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  append_utf8(out, cp);
}

std::string utf8_encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) utf8_append(out, c);
  return out;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

int64_t py_len(std::string_view text) {
  if (is_ascii(text)) return static_cast<int64_t>(text.size());
  return static_cast<int64_t>(utf8_decode(text).size());
}

bool py_isspace(char32_t c) {
  // Python's str.isspace also counts the information separators U+001C..U+001F (bidirectional
  // class B or S), which Unicode's White_Space does not.
  return (c >= 0x1C && c <= 0x1F) || is_unicode_white_space(c);
}

std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string s = utf8_decode(text);
  std::u32string set;
  if (chars) set = utf8_decode(*chars);
  auto strip_this = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strip_this(s[begin])) ++begin;
  if (right)
    while (end > begin && strip_this(s[end - 1])) --end;
  return utf8_encode(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw TemplateError("empty separator");
    // A byte-wise search is exact on valid UTF-8: a code point's encoding never matches inside another's.
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = text.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(text.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(text.substr(pos));
    } else {
      size_t end = text.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t hit = text.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        rev.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      rev.emplace_back(text.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
    return parts;
  }
  // Whitespace splitting: runs of whitespace separate, leading/trailing whitespace gives no piece.
  const std::u32string s = utf8_decode(text);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && py_isspace(s[i])) ++i;
      if (i == s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        // Python keeps the remainder's trailing whitespace.
        parts.push_back(utf8_encode(std::u32string_view(s).substr(i)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !py_isspace(s[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(s).substr(i, j - i)));
      i = j;
    }
  } else {
    std::vector<std::string> rev;
    size_t i = s.size();
    while (true) {
      while (i > 0 && py_isspace(s[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) {
        rev.push_back(utf8_encode(std::u32string_view(s).substr(0, i)));
        break;
      }
      size_t j = i;
      while (j > 0 && !py_isspace(s[j - 1])) --j;
      rev.push_back(utf8_encode(std::u32string_view(s).substr(j, i - j)));
      i = j;
    }
    parts.assign(rev.rbegin(), rev.rend());
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view text) {
  // Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
  const std::u32string s = utf8_decode(text);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    const bool boundary = c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                          c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    lines.push_back(utf8_encode(std::u32string_view(s).substr(start, i - start)));
    if (c == U'\r' && i + 1 < s.size() && s[i + 1] == U'\n') ++i;
    start = i + 1;
  }
  if (start < s.size()) lines.push_back(utf8_encode(std::u32string_view(s).substr(start)));
  return lines;
}

std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every code point and at the end.
    const std::u32string s = utf8_decode(text);
    int64_t done = 0;
    for (char32_t c : s) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out += text.substr(pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

namespace {

void require_ascii_letters(std::string_view text, const char* method) {
  if (!is_ascii(text))
    throw TemplateError(fmt::format(
        "str.{}() of non-ASCII text is not supported (Unicode case mapping is not implemented)", method));
}

bool is_lower(char c) {
  return c >= 'a' && c <= 'z';
}
bool is_upper(char c) {
  return c >= 'A' && c <= 'Z';
}
char to_upper(char c) {
  return is_lower(c) ? static_cast<char>(c - 'a' + 'A') : c;
}
char to_lower(char c) {
  return is_upper(c) ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

std::string py_upper(std::string_view text) {
  require_ascii_letters(text, "upper");
  std::string out(text);
  for (char& c : out) c = to_upper(c);
  return out;
}

std::string py_lower(std::string_view text) {
  require_ascii_letters(text, "lower");
  std::string out(text);
  for (char& c : out) c = to_lower(c);
  return out;
}

std::string py_title(std::string_view text) {
  require_ascii_letters(text, "title");
  std::string out(text);
  bool previous_cased = false;
  for (char& c : out) {
    if (is_lower(c) || is_upper(c)) {
      c = previous_cased ? to_lower(c) : to_upper(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return out;
}

std::string py_capitalize(std::string_view text) {
  require_ascii_letters(text, "capitalize");
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) out[i] = i == 0 ? to_upper(out[i]) : to_lower(out[i]);
  return out;
}

namespace {

// Python's str.isprintable for the code points that commonly occur; others are treated as printable.
bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;  // spaces (Zs) and format characters
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x206F) return false;
  if (c == 0x3000 || c == 0xFEFF || c == 0x1680) return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;  // private use
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  return true;
}

}  // namespace

std::string py_repr(std::string_view text) {
  const std::u32string s = utf8_decode(text);
  const bool has_single = s.find(U'\'') != std::u32string::npos;
  const bool has_double = s.find(U'"') != std::u32string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : s) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (!py_isprintable(c)) {
      if (c <= 0xFF)
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
      else if (c <= 0xFFFF)
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      else
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest round-trip digits, in scientific form: [-]d[.ddd]e[+-]x.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  return sign + out;
}

std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t if_absent) {
    if (!v) return if_absent;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= length) {
      x = st < 0 ? length - 1 : length;
    }
    return x;
  };
  const int64_t b = clamp(start, st < 0 ? length - 1 : 0);
  const int64_t e = clamp(stop, st < 0 ? -1 : length);
  std::vector<int64_t> out;
  if (st > 0)
    for (int64_t i = b; i < e; i += st) out.push_back(i);
  else
    for (int64_t i = b; i > e; i += st) out.push_back(i);
  return out;
}

std::string py_slice(std::string_view text, std::optional<int64_t> start, std::optional<int64_t> stop,
                     std::optional<int64_t> step) {
  if (is_ascii(text)) {
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(text.size()), start, stop, step))
      out.push_back(text[static_cast<size_t>(i)]);
    return out;
  }
  const std::u32string s = utf8_decode(text);
  std::string out;
  for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), start, stop, step))
    utf8_append(out, s[static_cast<size_t>(i)]);
  return out;
}

}  // namespace ferry::jinja
