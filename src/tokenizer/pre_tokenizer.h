// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split, Digits, Metaspace,
// Whitespace, WhitespaceSplit and Sequence, with Hugging Face tokenizers'
// semantics. A pre-tokenizer cuts pieces of text into smaller pieces (the "words" the model sees)
// and may rewrite them (ByteLevel maps bytes to its alphabet, Metaspace spaces to '▁').
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ferry::tok {

// A piece of the text on its way through the pipeline.
struct Piece {
  std::string text;
  int32_t id = -1;         // >= 0: an added token, already final
  bool at_origin = false;  // starts at byte 0 of the original text (Metaspace's prepend_scheme "first")
};

// How a split treats the delimiters it finds (HF's SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Cuts `piece` at `matches` (sorted, non-overlapping byte ranges of piece.text) as HF's
// NormalizedString::split does, appending the non-empty results to `out`. `invert` swaps the roles
// of matches and the text between them.
void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<Piece>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites `pieces` in place; pieces with id >= 0 pass through untouched.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

// Builds the pre-tokenizer a tokenizer.json "pre_tokenizer" object describes; null for JSON null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config);

// GPT-2's pre-tokenization regex, used by ByteLevel with use_regex = true.
extern const char* const kGpt2Pattern;

}  // namespace ferry::tok
