// `ferry tokenize`: encode a text to token ids or decode ids to text with a model's tokenizer.json.
//
//   ferry tokenize --tokenizer MODEL_DIR --text "Hello world"       → [9906, 1917]
//   ferry tokenize --tokenizer MODEL_DIR --text "Hi" --no-special   → ids without <s> etc.
//   ferry tokenize --tokenizer MODEL_DIR --decode "[9906, 1917]"    → Hello world
//   ferry tokenize --data train.yaml --show 3   → the first 3 examples as trained, ⟦trained⟧ marked,
//                                                 how they pack, and the cache summary
//
// One function per mode; the mode is chosen by which input option is given.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_text.h"
#include "data/packing.h"
#include "data/trained_spans.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"
#include "train/train_config.h"
#include "train/training_data.h"

namespace ferry::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;      // model directory or tokenizer.json
  std::string text;           // --text: encode this
  std::string decode;         // --decode: a JSON array of ids
  bool no_special = false;    // encode without the post-processor's special tokens
  bool skip_special = false;  // decode without special tokens
};

// --text: prints the ids as a JSON array.
void run_encode_text(const Tokenizer& tokenizer, const TokenizeOptions& o) {
  const std::vector<int32_t> ids = tokenizer.encode(o.text, !o.no_special);
  std::string out = "[";
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) out += ", ";
    out += std::to_string(ids[k]);
  }
  out += "]\n";
  std::fputs(out.c_str(), stdout);
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::string error;
  const std::optional<nlohmann::json> j = try_parse_json(text, &error);
  if (!j)
    fail("tokenize", "--decode takes a JSON array of token ids, like \"[1, 2, 3]\"; the text is {}", error);
  if (!j->is_array())
    fail("tokenize", "--decode takes a JSON array of token ids, like \"[1, 2, 3]\"; got {}", text);
  std::vector<int32_t> ids;
  for (const auto& v : *j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail("tokenize", "--decode: {} is not a token id (a non-negative integer)", json_excerpt(v));
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// --decode: prints the text of the ids.
void run_decode_ids(const Tokenizer& tokenizer, const TokenizeOptions& o) {
  const std::string text = tokenizer.decode(parse_ids(o.decode), o.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

const char* packing_name(PackingMode mode) {
  return mode == PackingMode::BestFit ? "best_fit" : mode == PackingMode::Split ? "split" : "none";
}

// --show N: the first N documents as the model will see them, trained spans marked, and what packing
// does to the whole data (the same warnings `ferry train` gives).
void show_examples(const TrainConfig& config, int64_t count, TrainingDataSummary* summary) {
  const ModelConfig model = load_model_config(config.model);
  const std::vector<Document> docs = load_training_documents(config, model, summary);
  const Tokenizer tokenizer = Tokenizer::load(config.tokenizer.empty() ? config.model : config.tokenizer);
  const size_t shown = std::min(docs.size(), static_cast<size_t>(count));
  for (size_t i = 0; i < shown; ++i) {
    int64_t trained = 0;
    for (int32_t l : docs[i].labels) trained += l != kIgnoreIndex;
    fmt::print("--- example {} of {}: {} tokens, {} trained (between {} and {}) ---\n{}\n", i + 1,
               docs.size(), docs[i].input_ids.size(), trained, kTrainedOpen, kTrainedClose,
               mark_trained_spans(docs[i], tokenizer));
  }
  const PackingMode mode = packing_mode(config, *summary);
  PackStats stats;
  pack_documents(docs, config.seq_len, mode, &stats);
  fmt::print(
      "--- packing {}: {} documents -> {} rows of {} tokens; {} split, {} truncated ({} tokens dropped), {} "
      "padding tokens ---\n",
      packing_name(mode), stats.documents, stats.rows, config.seq_len, stats.split_documents,
      stats.truncated_documents, stats.dropped_tokens, stats.pad_tokens);
}

// --data CONFIG.yaml [key=value ...]: tokenizes the training data of a config into its cache, so
// that `ferry train` with the same config starts at once; prints what was built.
void run_tokenize_data(const std::string& config_path, const std::vector<std::string>& overrides,
                       int64_t show) {
  const TrainConfig config = load_train_config(config_path, overrides);
  TrainingDataSummary s;
  if (show > 0)
    show_examples(config, show, &s);
  else
    s = prepare_training_data(config);
  const nlohmann::json out = {
      {"tokenized", s.tokenized},           {"from_cache", s.from_cache},
      {"cache", s.cache.string()},          {"fingerprint", s.fingerprint},
      {"documents", s.documents},           {"tokens", s.tokens},
      {"trained_tokens", s.trained_tokens}, {"skipped_malformed", s.skipped_malformed}};
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize",
                                 "Encode text to token ids, or decode ids to text, with a tokenizer.json");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "model directory with tokenizer.json, or a tokenizer.json path");
  auto data = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto* data_opt = cmd->add_option(
      "--data", *data, "training config (YAML): tokenize its data into the cache ahead of `ferry train`");
  cmd->add_option("overrides", *overrides, "key=value settings for --data's config");
  auto show = std::make_shared<int64_t>(0);
  cmd->add_option(
      "--show", *show,
      "with --data: print the first N examples with the trained tokens marked, and how they pack");
  auto* text = cmd->add_option("--text", o->text, "text to encode; prints the ids as a JSON array");
  auto* decode = cmd->add_option("--decode", o->decode, "JSON array of ids to decode, like \"[1, 2, 3]\"");
  text->excludes(decode);
  cmd->add_flag("--no-special", o->no_special,
                "encode without the special tokens the tokenizer adds (e.g. <s>)");
  cmd->add_flag("--skip-special", o->skip_special, "decode without special tokens");
  data_opt->excludes(text);
  data_opt->excludes(decode);
  cmd->callback([o, text, decode, data_opt, data, overrides, show] {
    FERRY_CHECK(*show >= 0, "tokenize", "--show takes a number of examples, got {}", *show);
    if (data_opt->count() > 0) {
      run_tokenize_data(*data, *overrides, *show);
      return;
    }
    FERRY_CHECK(*show == 0, "tokenize", "--show prints a config's examples: give --data CONFIG.yaml too");
    if (text->count() == 0 && decode->count() == 0)
      fail("tokenize", "give --text TEXT, --decode \"[ids]\" or --data CONFIG.yaml");
    if (o->tokenizer.empty())
      fail("tokenize", "give --tokenizer DIR (a model directory with tokenizer.json)");
    const Tokenizer tokenizer = Tokenizer::load(o->tokenizer);
    if (text->count() > 0)
      run_encode_text(tokenizer, *o);
    else
      run_decode_ids(tokenizer, *o);
  });
}

}  // namespace ferry::cli
