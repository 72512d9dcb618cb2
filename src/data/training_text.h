// Training text → Document: the step every text format ends with.
//
// A record becomes a TrainingText: the exact text the model reads, and the byte ranges of it that the
// model is trained to produce (assistant turns, completions, or everything). Tokenizing maps ranges to
// tokens with one rule, the same at every boundary:
//
//   a token is trained (label = its id) when any byte it stands for lies in a trained range;
//   a token that stands for no byte (bos/eos added by the tokenizer, a SentencePiece prefix ▁) is
//   trained when its position p lies in one (begin <= p < end); every other token is -100.
//
// So a token straddling a boundary is trained: the model must still produce the characters of the
// range it carries. Where a trained range should be followed by end-of-sequence and the text does
// not end it with a stop string, eos_after asks for an eos token (trained) right after the range's
// last token; at the very end of a text that the tokenizer itself ends with eos (add_special_tokens
// with an eos-adding post-processor), that eos is trained instead of a second one.
//
// Token ranges come from TextEncoder (exact alignment with the text). When a tokenizer's normalizer
// rewrote the text so that tokens cannot be aligned (e.g. NFC recomposing decomposed characters) and
// the masks need them, the text is encoded range by range instead (each piece separately, so the
// boundaries are token boundaries); that is counted in TokenizeStats::encoded_by_range and logged by
// the loader, never silent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/document.h"
#include "data/text_encoder.h"

namespace ferry {

struct TrainingText {
  std::string text;
  std::vector<ByteRange> trained;  // sorted, disjoint, non-empty
  std::vector<bool> eos_after;     // one per trained range
  // Whether the tokenizer adds its special tokens (bos, ...) around the text: true for plain text
  // formats; false for text a chat template rendered (it writes them itself, as
  // apply_chat_template(tokenize=True) encodes without adding any).
  bool add_special_tokens = true;
};

struct TokenizeStats {
  int64_t encoded_by_range = 0;  // texts whose tokens could not be aligned (see above)
  int64_t eos_inserted = 0;      // eos tokens inserted after trained ranges
  int64_t trained_tokens = 0;    // labels that are not -100

  TokenizeStats& operator+=(const TokenizeStats& other);
};

// Throws ferry::Error when an eos token is needed and the tokenizer has none.
Document tokenize_training_text(const TrainingText& text, const TextEncoder& encoder, TokenizeStats* stats);

// Checks the invariants of `text` (ranges sorted, disjoint, non-empty, inside the text; one eos flag
// per range); a violation is a bug in the caller.
void check_training_text(const TrainingText& text);

}  // namespace ferry
