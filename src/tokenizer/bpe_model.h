// The BPE model of tokenizer.json ("model": {"type": "BPE"}), with Hugging Face tokenizers'
// semantics: a word is split into characters (each looked up in the vocabulary, else its bytes as
// <0xNN> tokens with byte_fallback, else the unk token, fused when fuse_unk), then the pair of
// adjacent symbols with the lowest merge rank is merged until no merge applies (leftmost first
// among equal ranks). With ignore_merges, a word that is itself in the vocabulary is one token.
//
// Speed: merges live in a flat hash map keyed by the id pair; the merge loop uses a binary heap
// over a doubly linked symbol list (O(n log n) per word); each thread keeps a cache of words it
// has already tokenized.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ferry::tok {

// std::string keys found by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // From tokenizer.json's "model" object. Throws ferry::Error for a malformed or unsupported model.
  explicit BpeModel(const nlohmann::json& config);
  ~BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;
  // The same without the per-thread cache (the slow, obvious path the cache is tested against).
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token of an id, or null when the model has none.
  const std::string* id_to_token(int32_t id) const;
  // Whether long words are cut at a marker no merge crosses (see split_marker_).
  bool splits_long_words() const { return !split_marker_.empty(); }
  // Number of distinct tokens in the vocabulary.
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeMap;
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;
  void tokenize_cached(std::string_view word, std::vector<int32_t>& ids) const;

  Vocab vocab_;
  std::vector<std::string> id_to_token_;  // by id; ids without a token hold an empty string
  std::vector<bool> has_token_;
  std::unique_ptr<MergeMap> merges_;  // owned: a constructor that throws frees it too
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_ids_[256];  // <0xNN> tokens for byte_fallback; -1 where missing
  uint64_t cache_key_;     // identifies this model in the per-thread caches
  // A word boundary no merge can cross ("▁" in SentencePiece vocabularies), or empty: when no token
  // holds the marker after anything but the marker itself, a merge never joins the symbol before a
  // run of markers with the run, so a long word (a whole text, without pre-tokenizer) is tokenized
  // piece by piece, each piece cached, with the same result.
  std::string split_marker_;
};

}  // namespace ferry::tok
