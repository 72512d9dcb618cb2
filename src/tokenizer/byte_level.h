// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one printable Unicode
// character, so that BPE works on text without spaces or control characters. Bytes 0x21..0x7E,
// 0xA1..0xAC and 0xAE..0xFF stand for themselves; the 68 others map to U+0100.. in byte order
// (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tok {

// The UTF-8 encoding of the character that stands for byte b.
const std::string& byte_to_char(uint8_t b);
// The byte a character stands for, or -1 when cp is not in the alphabet.
int char_to_byte(char32_t cp);

// Appends the byte-level form of `text` (each byte as its character) to out.
void append_byte_level(std::string& out, std::string_view text);
// Reverses append_byte_level for one token: appends its bytes and returns true, or returns false
// (appending nothing) when a character is outside the alphabet.
bool append_byte_level_bytes(std::string& out, std::string_view token);

}  // namespace ferry::tok
