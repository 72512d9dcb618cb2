// A Hugging Face tokenizer (tokenizer.json), natively: no Python at run time.
//
// Encoding follows Hugging Face tokenizers step by step (the oracle of tests/tokenizer_golden_test):
//   text → repair invalid UTF-8 (each maximal invalid byte sequence → U+FFFD; see tokenizer/utf8.h)
//        → cut out added tokens with normalized = false
//        → normalize each remaining piece, cut out added tokens with normalized = true
//        → pre-tokenize into words → BPE each word → post-process (special tokens) when asked.
// Decoding maps ids to tokens (added tokens first; ids without a token are dropped, as in HF) and
// runs the decoder.
//
// Supported: BPE models (byte-level like GPT-2 / Llama 3 / Qwen, and SentencePiece-style with
// byte_fallback like Llama 2 / Mistral); the normalizers, pre-tokenizers, post-processors and
// decoders those use. Anything else in a tokenizer.json is a ferry::Error at load, never ignored.
//
// A Tokenizer is immutable after load, cheap to copy (shared state) and safe to use from many
// threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

class Tokenizer {
 public:
  // A directory with tokenizer.json (and optionally tokenizer_config.json, for bos/eos/pad and
  // add_bos_token/add_eos_token), or the path of a tokenizer.json (tokenizer_config.json is then
  // looked for beside it). Throws ferry::Error for a missing, malformed or unsupported file.
  static Tokenizer load(const std::filesystem::path& path);
  // From the contents of tokenizer.json and, when not empty, tokenizer_config.json.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});

  // Token ids of `text`; add_special_tokens applies the post-processor (e.g. Llama 2's <s>).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // encode() of each text, spread over all threads of ThreadPool::global(). Do not call it from
  // inside a job of that pool.
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                 bool add_special_tokens = true) const;
  // The text of `ids`; skip_special_tokens drops added tokens marked special.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Distinct tokens, the model's vocabulary and added tokens together (HF's get_vocab_size(true)).
  int64_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The string of a token id (added tokens first), or nullopt when the id has none.
  std::optional<std::string> id_to_token(int32_t id) const;

  // From tokenizer_config.json ("bos_token" etc., a string or {"content": ...}); without that
  // file, bos/eos are the first/last special token the post-processor adds, if any.
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> pad_token_id() const;
  // Whether encode(text, true) puts the bos token first / the eos token last.
  bool adds_bos() const;
  bool adds_eos() const;
  // The ids encode(text, true) adds before and after the text's ids.
  const std::vector<int32_t>& special_prefix() const;
  const std::vector<int32_t>& special_suffix() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace ferry
