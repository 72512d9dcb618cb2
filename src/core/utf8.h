// UTF-8 decoding, encoding and lossy repair, shared by the tokenizer and the template language.
//
// ferry's policy for invalid UTF-8 (Hugging Face tokenizers only ever sees valid strings): every
// text is first repaired like Rust's String::from_utf8_lossy and the WHATWG TextDecoder do, each
// maximal invalid subsequence becoming one U+FFFD. Decoding byte-level tokens back to text uses the
// same repair, as HF's decoders do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry {
// Length of the UTF-8 sequence that starts with `lead` (1 for a stray byte, so loops advance).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at s[i] of a valid UTF-8 string and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);

// Unicode's White_Space property (Rust's char::is_whitespace, the tokenizers' regex \s).
bool is_unicode_white_space(char32_t cp);

// Returns s with each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string repair_utf8(std::string_view s);
// Appends the repaired s to out.
void append_repaired_utf8(std::string& out, std::string_view s);

}  // namespace ferry
