// Added tokens (tokenizer.json "added_tokens"): special tokens like <|begin_of_text|> and tokens
// added for fine-tuning. They are cut out of the text before the model sees it, as Hugging Face
// tokenizers does:
//   1. tokens with normalized = false are found in the raw text;
//   2. each remaining piece is normalized, then tokens with normalized = true are found in it
//      (their contents normalized the same way).
// Finding is leftmost-longest, non-overlapping (HF's Aho-Corasick, MatchKind::LeftmostLongest). A
// single_word token only counts with no word character on either side; lstrip / rstrip take the
// whitespace on their left / right into the token.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"

namespace ferry::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class Normalizer;

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) normalizes the contents of tokens with normalized = true.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Cuts the added tokens with normalized == `normalized_set` out of `pieces`; each found token
  // becomes a piece with its id.
  void split(std::vector<Piece>& pieces, bool normalized_set) const;
  bool has(bool normalized_set) const { return !(normalized_set ? normalized_ : raw_).nodes.empty(); }

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(const std::string& content) const;

 private:
  // A byte trie over the patterns of one set.
  struct Trie {
    struct Node {
      std::unordered_map<uint8_t, int32_t> next;
      int32_t token = -1;  // index into tokens_ when a pattern ends here
    };
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    void insert(const std::string& pattern, int32_t token);
    // Length of the longest pattern starting at text[at], and its token; 0 when none.
    size_t longest(const std::string& text, size_t at, int32_t* token) const;
  };
  void split_piece(const Piece& piece, const Trie& trie, std::vector<Piece>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_, normalized_;
};

}  // namespace ferry::tok
