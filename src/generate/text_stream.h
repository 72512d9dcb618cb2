// New tokens → the text they add, for printing a reply as it is generated. A token can end inside a
// UTF-8 character (byte-level vocabularies split them); such a tail is held back until the
// character is whole, so what is printed is always valid UTF-8 and joins up to decode(all tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // The text that token adds to the reply ("" while a character is incomplete).
  std::string push(int32_t token);
  // What is still held back, at the end of the reply.
  std::string finish();
  // The whole reply, special tokens skipped (as transformers' decode(skip_special_tokens=True)).
  std::string text() const;

 private:
  std::string pending(bool at_end);

  const Tokenizer& tokenizer_;
  std::vector<int32_t> tokens_;
  std::string emitted_;  // the text already returned
};

}  // namespace ferry
