// Unicode classes the tokenizer's patterns need, as Rust's regex sees them (utf8proc's tables).
#pragma once

#include "core/utf8.h"

namespace ferry::tok {

// A word character as Rust's regex \w sees it: letters, marks, decimal digits, connector
// punctuation, letter numbers and the joiners.
bool is_word_char(char32_t cp);

}  // namespace ferry::tok
