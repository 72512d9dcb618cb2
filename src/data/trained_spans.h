// A document as a person checks it: its text, with the tokens the loss trains on marked, so that a
// wrong mask (a prompt trained, a response masked, a missing end-of-turn token) is seen before a
// run spends hours on it. `ferry tokenize --data CONFIG --show N` prints these.
#pragma once

#include <string>

#include "data/document.h"
#include "tokenizer/tokenizer.h"

namespace ferry {

inline constexpr const char* kTrainedOpen = "\u27e6";   // ⟦
inline constexpr const char* kTrainedClose = "\u27e7";  // ⟧

// The decoded text with every run of trained tokens (labels not kIgnoreIndex) between ⟦ and ⟧.
std::string mark_trained_spans(const Document& document, const Tokenizer& tokenizer);

}  // namespace ferry
