// A tiny byte-level BPE tokenizer for data tests (no npm fixture needed): ids 0..255 are the bytes
// (GPT-2's byte alphabet), a few merges make multi-byte tokens (so that tokens can straddle mask
// boundaries), and chat special tokens sit at 300..308. Every id is < 320, the vocabulary of
// preset_config("llama", "tiny").
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"
#include "tokenizer/byte_level.h"

namespace ferry::test {

inline const std::vector<std::pair<std::string, int>>& tiny_special_tokens() {
  static const std::vector<std::pair<std::string, int>> tokens = {{"<|begin_of_text|>", 300},
                                                                  {"<|end_of_text|>", 301},
                                                                  {"<|im_start|>", 302},
                                                                  {"<|im_end|>", 303},
                                                                  {"<|start_header_id|>", 304},
                                                                  {"<|end_header_id|>", 305},
                                                                  {"<|eot_id|>", 306},
                                                                  {"<s>", 307},
                                                                  {"</s>", 308}};
  return tokens;
}

// tokenizer.json text. add_bos: the post-processor puts <|begin_of_text|> first (as Llama 3's does).
inline std::string tiny_tokenizer_json(bool add_bos = true) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::byte_to_char(static_cast<uint8_t>(b))] = b;
  // Merges, in rank order; each makes the next id.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"},   {"Ċ", "Ċ"},  {"a", "s"},  {"Ġ", "a"},   {"e", "r"},
      {"o", "u"}, {"Ġ", "c"}, {"a", "t"},   {"Ġc", "at"}, {"l", "l"},  {"e", "ll"}, {"h", "ell"}, {"o", "n"},
      {"s", "s"}, {"i", "s"}, {"Ġ", "is"},  {"a", "n"},   {"Ġ", "an"}, {"t", "an"}, {"Ġ", "w"},   {"o", "r"},
  };
  json merge_list = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    merge_list.push_back(a + " " + b);
  }
  json added = json::array();
  for (const auto& [content, id] : tiny_special_tokens())
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  json post = nullptr;
  if (add_bos) {
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array()},
            {"special_tokens",
             {{"<|begin_of_text|>",
               {{"id", "<|begin_of_text|>"}, {"ids", {300}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  }
  json t = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", post},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
  return t.dump();
}

// Writes tokenizer.json and tokenizer_config.json (with the given eos and an optional chat template)
// into dir.
inline void write_tiny_tokenizer(const std::filesystem::path& dir, const std::string& eos_token,
                                 const std::string& chat_template = "", bool add_bos = true) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json(add_bos);
  nlohmann::json config = {{"bos_token", "<|begin_of_text|>"},
                           {"eos_token", eos_token},
                           {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
}

// The tiny tokenizer with Qwen2.5-Instruct's chat template (fixtures/chat_templates) and its
// <|im_end|> end of turn: a model directory that chat data can train on.
inline void write_tiny_chat_tokenizer(const std::filesystem::path& dir) {
  write_tiny_tokenizer(dir, "<|im_end|>",
                       read_file(fixtures_dir() / "chat_templates" / "qwen2.5-instruct.jinja"));
}

}  // namespace ferry::test
