// `ferry tokenize`: encode a text to token ids or decode ids to text with a model's tokenizer.json.
//
//   ferry tokenize --tokenizer MODEL_DIR --text "Hello world"       → [9906, 1917]
//   ferry tokenize --tokenizer MODEL_DIR --text "Hi" --no-special   → ids without <s> etc.
//   ferry tokenize --tokenizer MODEL_DIR --decode "[9906, 1917]"    → Hello world
//
// One function per mode; the mode is chosen by which input option is given.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_text.h"
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

// --data CONFIG.yaml [key=value ...]: tokenizes the training data of a config into its cache, so
// that `ferry train` with the same config starts at once; prints what was built.
void run_tokenize_data(const std::string& config_path, const std::vector<std::string>& overrides) {
  const TrainConfig config = load_train_config(config_path, overrides);
  const TrainingDataSummary s = prepare_training_data(config);
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
  auto* text = cmd->add_option("--text", o->text, "text to encode; prints the ids as a JSON array");
  auto* decode = cmd->add_option("--decode", o->decode, "JSON array of ids to decode, like \"[1, 2, 3]\"");
  text->excludes(decode);
  cmd->add_flag("--no-special", o->no_special,
                "encode without the special tokens the tokenizer adds (e.g. <s>)");
  cmd->add_flag("--skip-special", o->skip_special, "decode without special tokens");
  data_opt->excludes(text);
  data_opt->excludes(decode);
  cmd->callback([o, text, decode, data_opt, data, overrides] {
    if (data_opt->count() > 0) {
      run_tokenize_data(*data, *overrides);
      return;
    }
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
