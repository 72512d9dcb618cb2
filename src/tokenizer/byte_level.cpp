#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace ferry::tok {

namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 0x144> to_byte;  // all characters of the alphabet are below U+0144
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = self ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next++);
      append_utf8(to_char[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_char(uint8_t b) {
  return tables().to_char[b];
}

int char_to_byte(char32_t cp) {
  return cp < 0x144 ? tables().to_byte[cp] : -1;
}

void append_byte_level(std::string& out, std::string_view text) {
  const Tables& t = tables();
  for (const char c : text) out += t.to_char[static_cast<uint8_t>(c)];
}

bool append_byte_level_bytes(std::string& out, std::string_view token) {
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const int b = char_to_byte(next_code_point(token, i));
    if (b < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace ferry::tok
