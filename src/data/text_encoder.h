// What the data layer needs from a tokenizer: ids of a text and, for each id, the byte range of the
// text it stands for (so that character-exact loss masks become token masks).
//
// TokenizerTextEncoder gives ranges for a ferry::Tokenizer by aligning its tokens with the text:
// each token's string is read back into bytes (added tokens as written; byte-level BPE tokens
// through GPT-2's byte alphabet; SentencePiece tokens with ▁ as a space and <0xNN> as a byte) and
// the tokens must then spell the text exactly, left to right. A SentencePiece normalizer's
// prepended ▁ is the one thing allowed to be absent from the text (it covers no text byte). When a
// tokenizer's normalizer changes the text in other ways (NFC recomposition of decomposed
// characters, say), alignment fails and encode() says so by returning false; the caller then
// decides (see data/training_text.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ferry {

struct ByteRange {
  size_t begin = 0, end = 0;
  bool operator==(const ByteRange&) const = default;
};

class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  // Ids of `text` with the special tokens the tokenizer adds around a sequence when
  // add_special_tokens (bos for Llama, say). ranges (when not null) receives one range per id;
  // added ids get empty ranges at 0 (before the text) or text.size() (after it). Returns false when
  // `ranges` was asked for and the tokens cannot be aligned with the text (ids are still set).
  virtual bool encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids,
                      std::vector<ByteRange>* ranges) const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  // Whether encode(text, true) already ends with the eos token.
  virtual bool adds_eos() const = 0;
  // The ids encode(text, true) puts before and after the text's own ids.
  virtual std::vector<int32_t> special_prefix() const = 0;
  virtual std::vector<int32_t> special_suffix() const = 0;
};

class TokenizerTextEncoder : public TextEncoder {
 public:
  explicit TokenizerTextEncoder(Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}
  bool encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>* ids,
              std::vector<ByteRange>* ranges) const override;
  std::optional<int32_t> eos_token_id() const override { return tokenizer_.eos_token_id(); }
  bool adds_eos() const override { return tokenizer_.adds_eos(); }
  std::vector<int32_t> special_prefix() const override { return tokenizer_.special_prefix(); }
  std::vector<int32_t> special_suffix() const override { return tokenizer_.special_suffix(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // Texts encoded so far (for tests of the cache: a cached load encodes nothing).
  int64_t calls() const { return calls_.load(); }

 private:
  Tokenizer tokenizer_;
  mutable std::atomic<int64_t> calls_{0};
};

// Aligns `ids` (no post-processor additions) with `text` given each id's token string; fills
// `ranges` and returns true when the tokens spell the text, as described above.
bool align_tokens(std::string_view text, const std::vector<int32_t>& ids,
                  const std::vector<std::optional<std::string>>& token_strings,
                  std::vector<ByteRange>* ranges);

}  // namespace ferry
