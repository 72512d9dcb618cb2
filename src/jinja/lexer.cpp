#include "jinja/lexer.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/error.h"
#include "jinja/error.h"
#include "jinja/pystr.h"

namespace ferry::jinja {

namespace {

// Length of the UTF-8 sequence starting with byte c (1 for stray continuation bytes).
size_t sequence_length(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

// The code point at text[pos] (U+FFFD where the bytes are not valid UTF-8) and its length.
char32_t code_point_at(std::string_view text, size_t pos, size_t* length) {
  const size_t n = std::min(sequence_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
  *length = n;
  try {
    const std::u32string cp = utf8_decode(text.substr(pos, n));
    return cp.size() == 1 ? cp[0] : 0xFFFD;
  } catch (const TemplateError&) {
    return 0xFFFD;
  }
}

// Python's str.rstrip(): the length of text without its trailing whitespace.
size_t rstrip_length(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t n;
    if (!py_isspace(code_point_at(text, start, &n)) || start + n != end) break;
    end = start;
  }
  return end;
}

// Position after the whitespace (regex \s*) that starts at pos.
size_t skip_whitespace(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t n;
    if (!py_isspace(code_point_at(text, pos, &n))) break;
    pos += n;
  }
  return pos;
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : src_(std::move(source)), name_(name) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      // The next tag opener: {{, {% or {#.
      size_t open = pos_;
      char kind = 0;
      while (true) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) {
          open = std::string::npos;
          break;
        }
        const char next = src_[open + 1];
        if (next == '{' || next == '%' || next == '#') {
          kind = next;
          break;
        }
        ++open;
      }
      if (open == std::string::npos) {
        emit_data(std::string_view(src_).substr(pos_));
        advance_to(src_.size());
        break;
      }
      std::string_view text = std::string_view(src_).substr(pos_, open - pos_);
      char sign = 0;
      if (open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')) sign = src_[open + 2];
      if (sign == '-') {
        text = text.substr(0, rstrip_length(text));
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces and tabs between the start of the line and the tag.
        const size_t newline = text.rfind('\n');
        const size_t l_pos = newline == std::string_view::npos ? 0 : newline + 1;
        if (l_pos > 0 || line_starting) {
          const std::string_view tail = text.substr(l_pos);
          if (std::all_of(tail.begin(), tail.end(), [](char c) { return c == ' ' || c == '\t'; }))
            text = text.substr(0, l_pos);
        }
      }
      emit_data(text);
      advance_to(open + 2 + (sign ? 1 : 0));
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%') {
        check_not_raw();
        push(TokenType::BlockBegin, "{%");
        line_starting = lex_tag(TokenType::BlockEnd);
      } else {
        push(TokenType::VariableBegin, "{{");
        line_starting = lex_tag(TokenType::VariableEnd);
      }
    }
    Token end;
    end.type = TokenType::End;
    end.line = line_;
    end.column = column();
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& what, int line) const {
    fail("jinja", "{}:{}: {}", name_, line, what);
  }

  void advance_to(size_t pos) {
    for (size_t i = pos_; i < pos; ++i) {
      if (src_[i] != '\n') continue;
      ++line_;
      line_start_ = i + 1;
    }
    pos_ = pos;
  }

  int column() const { return static_cast<int>(pos_ - line_start_) + 1; }

  void emit_data(std::string_view text) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::Data;
    t.value = std::string(text);
    t.line = line_;
    t.column = column();
    tokens_.push_back(std::move(t));
  }

  void push(TokenType type, std::string value) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line_;
    t.column = column();
    tokens_.push_back(std::move(t));
  }

  // {% raw %} would need the lexer to stop interpreting tags; say so instead of mis-lexing it.
  void check_not_raw() {
    size_t p = skip_whitespace(src_, pos_);
    if (src_.compare(p, 3, "raw") == 0 && (p + 3 >= src_.size() || !is_name_char(src_[p + 3])))
      error("{% raw %} blocks are not supported by ferry's Jinja interpreter", line_);
  }

  // After {#: skips to the comment's end. Returns whether the consumed text ends with a newline.
  bool lex_comment() {
    const int start_line = line_;
    size_t p = pos_;
    while (true) {
      const size_t hit = src_.find("#}", p);
      if (hit == std::string::npos) error("missing end of comment tag #}", start_line);
      size_t end;
      if (hit > pos_ && src_[hit - 1] == '-') {
        end = skip_whitespace(src_, hit + 2);
      } else if (hit > pos_ && src_[hit - 1] == '+') {
        end = hit + 2;
      } else {
        end = hit + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
      }
      const bool newline = end > 0 && src_[end - 1] == '\n';
      advance_to(end);
      return newline;
    }
  }

  // Lexes the inside of {% ... %} or {{ ... }} up to and including its end. Returns whether the
  // end's match ends with a newline (lstrip_blocks' "line starting" state).
  bool lex_tag(TokenType end_type) {
    const char end_char = end_type == TokenType::BlockEnd ? '%' : '}';
    const int start_line = line_;
    std::vector<char> balancing;
    while (true) {
      if (pos_ >= src_.size())
        error(end_type == TokenType::BlockEnd ? "missing end of block tag %}"
                                              : "missing end of variable tag }}",
              start_line);
      // The tag's end, unless brackets are open.
      if (balancing.empty()) {
        const std::string_view rest = std::string_view(src_).substr(pos_);
        const std::string close = std::string(1, end_char) + "}";
        if (rest.substr(0, 3) == "-" + close) {
          push(end_type, close);
          advance_to(skip_whitespace(src_, pos_ + 3));
          return pos_ > 0 && src_[pos_ - 1] == '\n';
        }
        if (end_type == TokenType::BlockEnd && rest.substr(0, 3) == "+" + close) {
          push(end_type, close);
          advance_to(pos_ + 3);
          return false;
        }
        if (rest.substr(0, 2) == close) {
          push(end_type, close);
          size_t end = pos_ + 2;
          if (end_type == TokenType::BlockEnd && end < src_.size() && src_[end] == '\n')
            ++end;  // trim_blocks
          advance_to(end);
          return src_[pos_ - 1] == '\n';
        }
      }
      const char c = src_[pos_];
      size_t n;
      if (py_isspace(code_point_at(src_, pos_, &n))) {
        advance_to(skip_whitespace(src_, pos_));
        continue;
      }
      if (is_digit(c)) {
        lex_number();
        continue;
      }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        push(TokenType::Name, src_.substr(pos_, e - pos_));
        advance_to(e);
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string();
        continue;
      }
      static const std::array<const char*, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (const char* op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          push(TokenType::Operator, op);
          advance_to(pos_ + 2);
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static const std::string kOne = "+-/*%~[](){}><=.:|,;";
      if (kOne.find(c) != std::string::npos) {
        if (c == '(' || c == '[' || c == '{') {
          balancing.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
          if (balancing.empty()) error(std::string("unexpected '") + c + "'", line_);
          if (balancing.back() != c)
            error(std::string("unexpected '") + c + "', expected '" + balancing.back() + "'", line_);
          balancing.pop_back();
        }
        push(TokenType::Operator, std::string(1, c));
        advance_to(pos_ + 1);
        continue;
      }
      error(std::string("unexpected character '") + std::string(src_.substr(pos_, n)) + "'", line_);
    }
  }

  void lex_number() {
    const int line = line_, column = this->column();
    size_t p = pos_;
    auto digits = [&](size_t q, auto accept) {
      // (\d+_)*\d+ style: digits with single underscores between them.
      size_t start = q;
      while (q < src_.size() &&
             (accept(src_[q]) || (src_[q] == '_' && q > start && q + 1 < src_.size() && accept(src_[q + 1]))))
        ++q;
      return q;
    };
    auto dec = [](char ch) { return is_digit(ch); };
    // 0x / 0o / 0b integers.
    if (src_[p] == '0' && p + 1 < src_.size() &&
        std::string("xXoObB").find(src_[p + 1]) != std::string::npos) {
      const char base_char = static_cast<char>(src_[p + 1] | 0x20);
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      size_t q = p + 2;
      int64_t value = 0;
      bool any = false;
      while (q < src_.size()) {
        if (src_[q] == '_') {
          ++q;
          continue;
        }
        const int d = hex_value(src_[q]);
        if (d < 0 || d >= base) break;
        value = value * base + d;
        any = true;
        ++q;
      }
      if (!any) error("malformed number literal", line);
      Token t;
      t.type = TokenType::Integer;
      t.int_value = value;
      t.value = src_.substr(p, q - p);
      t.line = line;
      tokens_.push_back(t);
      advance_to(q);
      return;
    }
    size_t q = digits(p, dec);
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1, dec);
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = digits(r, dec);
        is_float = true;
      }
    }
    std::string text = src_.substr(p, q - p);
    std::string clean;
    for (char ch : text)
      if (ch != '_') clean.push_back(ch);
    Token t;
    t.line = line;
    t.column = column;
    t.value = text;
    if (is_float) {
      t.type = TokenType::Float;
      // strtod, unlike stod, accepts subnormals (5e-324) and gives inf for overflow, as Python does.
      t.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      t.type = TokenType::Integer;
      if (clean.size() > 1 && clean[0] == '0' && clean.find_first_not_of('0') != std::string::npos)
        error("integer literals may not start with 0", line);
      try {
        t.int_value = std::stoll(clean);
      } catch (const std::exception&) {
        error("integer literal too large: " + text, line);
      }
    }
    tokens_.push_back(t);
    advance_to(q);
  }

  // A quoted string with Python's backslash escapes (jinja2 decodes them with "unicode-escape").
  void lex_string() {
    const int line = line_, column = this->column();
    const char quote = src_[pos_];
    std::string value;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) error("unterminated string", line);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) error("unterminated string", line);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          value.push_back('\\');
          break;
        case '\'':
          value.push_back('\'');
          break;
        case '"':
          value.push_back('"');
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t k = 0; k < count; ++k) {
            const int d = p + k < src_.size() ? hex_value(src_[p + k]) : -1;
            if (d < 0) error(std::string("truncated \\") + e + " escape in string", line);
            cp = cp * 16 + static_cast<char32_t>(d);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            error("string escape names an invalid code point", line);
          utf8_append(value, cp);
          p += count;
          break;
        }
        case 'N':
          error("\\N{...} escapes are not supported", line);
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
              cp = cp * 8 + static_cast<char32_t>(src_[p] - '0');
            utf8_append(value, cp);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // jinja2 re-encodes non-ASCII text as \xNN escapes before decoding, so a backslash before
            // a non-ASCII character yields text we do not reproduce.
            error("a backslash before a non-ASCII character in a string is not supported", line);
          } else {
            value.push_back('\\');  // unknown escapes stay as written
            value.push_back(e);
          }
      }
    }
    Token t;
    t.type = TokenType::String;
    t.value = std::move(value);
    t.line = line;
    t.column = column;
    tokens_.push_back(std::move(t));
    advance_to(p + 1);
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;  // where line_ starts in src_
  std::vector<Token> tokens_;
};

// jinja2 splits the source on \r\n, \r and \n, drops a final empty line (keep_trailing_newline=False)
// and joins with \n.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize_template(std::string_view source, const std::string& name) {
  return Lexer(normalize_newlines(source), name).run();
}

}  // namespace ferry::jinja
