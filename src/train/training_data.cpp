#include "train/training_data.h"

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "data/file_digest.h"
#include "data/record_formats.h"
#include "data/sha256.h"
#include "data/text_dataset.h"
#include "data/token_cache.h"
#include "data/token_dataset.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/model_source.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "data";
// Bump when the way records become tokens changes, so that old caches are not reused.
constexpr const char* kDataProcessingVersion = "ferry-data-1";

// The directory holding tokenizer.json (`tokenizer:` may name the file itself).
std::filesystem::path tokenizer_dir(const TrainConfig& config) {
  FERRY_CHECK(!config.tokenizer.empty() || !is_preset_model(config.model), kWhere,
              "model: {} has random weights and no tokenizer, and this data is text: give `tokenizer:` (a "
              "directory or tokenizer.json of the model family), or pre-tokenized data (input_ids)",
              config.model.string());
  std::filesystem::path p = config.tokenizer.empty() ? config.model : config.tokenizer;
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec)) p = p.parent_path();
  return p;
}

// Everything about the tokenizer and template that data processing uses.
struct TextSetup {
  std::filesystem::path dir;
  std::string tokenizer_json;
  std::string tokenizer_config;  // empty when the file is absent
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::vector<std::string> stop_strings;
};

// The eos ids of generation_config.json (an int or a list), when the model has the file.
std::vector<int64_t> generation_eos_ids(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  const nlohmann::json config =
      parse_json(read_text_file(path, kWhere), kWhere, path.string(), "fix or re-download it");
  std::vector<int64_t> ids;
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return ids;
  if (it->is_number_integer()) ids.push_back(it->get<int64_t>());
  if (it->is_array())
    for (const auto& v : *it)
      if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
  return ids;
}

TextSetup load_text_setup(const TrainConfig& config) {
  TextSetup s;
  s.dir = tokenizer_dir(config);
  const auto json_path = s.dir / "tokenizer.json";
  std::error_code ec;
  FERRY_CHECK(std::filesystem::exists(json_path, ec), kWhere,
              "text data needs a tokenizer, and {} has no tokenizer.json; set `tokenizer:` to a tokenizer "
              "directory, or "
              "give pre-tokenized data (data_format: tokens)",
              s.dir.string());
  s.tokenizer_json = read_text_file(json_path, kWhere);
  if (std::filesystem::exists(s.dir / "tokenizer_config.json", ec))
    s.tokenizer_config = read_text_file(s.dir / "tokenizer_config.json", kWhere);
  s.tokenizer = Tokenizer::from_json(s.tokenizer_json, s.tokenizer_config);
  nlohmann::json tokenizer_config = nlohmann::json::object();
  if (!s.tokenizer_config.empty())
    tokenizer_config = parse_json(s.tokenizer_config, kWhere, (s.dir / "tokenizer_config.json").string(),
                                  "fix or re-download it");
  if (!config.chat_template.empty()) {
    s.chat_template = ChatTemplate::from_file(config.chat_template, tokenizer_config);
  } else {
    s.chat_template = ChatTemplate::load(s.dir);
  }
  auto add_stop = [&](std::optional<std::string> text) {
    if (!text || text->empty()) return;
    if (std::find(s.stop_strings.begin(), s.stop_strings.end(), *text) == s.stop_strings.end())
      s.stop_strings.push_back(*text);
  };
  if (auto eos = s.tokenizer->eos_token_id()) add_stop(s.tokenizer->id_to_token(*eos));
  for (int64_t id : generation_eos_ids(config.model))
    if (id >= 0 && id <= INT32_MAX) add_stop(s.tokenizer->id_to_token(static_cast<int32_t>(id)));
  return s;
}

// The data files' bytes, as digests: remembered by size and mtime beside the caches
// (data/file_digest.h), so that an unchanged 20 GB file is not read again at every start.
void add_data_files(const TrainConfig& config,
                    const std::function<void(const std::string&, const std::string&)>& field) {
  const std::filesystem::path memo = training_cache_root(config) / "file-digests.json";
  for (const auto& path : config.data) {
    field("data.extension", path.extension().string());
    field("data", remembered_file_sha256(path, memo));
  }
}

// Pre-tokenized data is keyed like text: its files, and the options that shape its documents.
std::string token_fingerprint_of(const TrainConfig& config, const ModelConfig& model) {
  Sha256 h;
  auto field = [&](const std::string& name, const std::string& value) {
    h.update(name + "=" + std::to_string(value.size()) + ":" + value + "\n");
  };
  field("version", kDataProcessingVersion);
  field("pre-tokenized", "true");
  field("skip_malformed", config.skip_malformed ? "true" : "false");
  field("vocab_size", std::to_string(model.vocab_size));
  add_data_files(config, field);
  return h.hex_digest();
}

std::string fingerprint_of(const TrainConfig& config, const ModelConfig& model, const TextSetup& s) {
  Sha256 h;
  auto field = [&](const std::string& name, const std::string& value) {
    h.update(name);
    h.update("=");
    h.update(std::to_string(value.size()));
    h.update(":");
    h.update(value);
    h.update("\n");
  };
  field("version", kDataProcessingVersion);
  field("tokenizer.json", sha256_hex(s.tokenizer_json));
  field("tokenizer_config.json", sha256_hex(s.tokenizer_config));
  field("chat_template", s.chat_template ? sha256_hex(s.chat_template->source()) : "none");
  for (const auto& stop : s.stop_strings) field("stop", stop);
  field("data_format", data_format_name(config.data_format));
  field("train_on_prompt", config.train_on_prompt ? "true" : "false");
  field("skip_malformed", config.skip_malformed ? "true" : "false");
  // Template variables change the rendering; a run without any keeps the caches made before them.
  if (!config.chat_template_kwargs.empty()) field("chat_template_kwargs", config.chat_template_kwargs.dump());
  field("vocab_size", std::to_string(model.vocab_size));
  add_data_files(config, field);
  return h.hex_digest();
}

void check_data_files(const TrainConfig& config) {
  FERRY_CHECK(!config.data.empty(), kWhere, "no data given; set `data:` to one or more files");
  for (const auto& p : config.data) {
    std::error_code ec;
    FERRY_CHECK(std::filesystem::is_regular_file(p, ec), kWhere,
                "data file {} does not exist (or is not a file)", p.string());
  }
}

// Whether the data is read without a tokenizer: data_format tokens, or auto and every file is.
bool pre_tokenized(const TrainConfig& config, DataFormat format) {
  if (format == DataFormat::Tokens) return true;
  if (format != DataFormat::Auto) return false;
  for (const auto& p : config.data)
    if (file_data_format(p, DataFormat::Auto) != DataFormat::Tokens) return false;
  return true;
}

int64_t count_trained(const std::vector<Document>& docs, int64_t* tokens) {
  int64_t trained = 0;
  *tokens = 0;
  for (const auto& d : docs) {
    *tokens += static_cast<int64_t>(d.input_ids.size());
    for (int32_t l : d.labels) trained += l != kIgnoreIndex;
  }
  return trained;
}

int64_t data_bytes(const TrainConfig& config) {
  int64_t total = 0;
  for (const auto& p : config.data) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    if (!ec) total += static_cast<int64_t>(size);
  }
  return total;
}

// Whether every record was plain text ({"text": 12} by format): documents that split packing may cut.
bool only_plain_text(const nlohmann::json& records_by_format) {
  for (const auto& [format, count] : records_by_format.items())
    if (format != "text" && count.is_number() && count.get<int64_t>() > 0) return false;
  return !records_by_format.empty();
}

}  // namespace

PackingMode packing_mode(const TrainConfig& config, const TrainingDataSummary& data) {
  if (!config.packing) return PackingMode::None;
  switch (config.packing_strategy) {
    case PackingStrategy::BestFit:
      return PackingMode::BestFit;
    case PackingStrategy::Split:
      return PackingMode::Split;
    case PackingStrategy::Auto:
      break;
  }
  return data.plain_text ? PackingMode::Split : PackingMode::BestFit;
}

std::filesystem::path training_cache_root(const TrainConfig& config) {
  if (!config.cache_dir.empty()) return config.cache_dir;
  FERRY_CHECK(!config.output_dir.empty(), kWhere,
              "tokenized data is cached under cache_dir, or <output_dir>/.cache; set one of them");
  return config.output_dir / ".cache";
}

std::vector<Document> load_training_documents(const TrainConfig& config, const ModelConfig& model,
                                              TrainingDataSummary* summary_out) {
  check_data_files(config);
  const std::optional<DataFormat> format = config.data_format;
  TrainingDataSummary summary;

  if (pre_tokenized(config, *format)) {
    summary.fingerprint = token_fingerprint_of(config, model);
    summary.cache = training_cache_root(config) / summary.fingerprint;
    std::vector<Document> docs;
    if (auto cached = read_token_cache(summary.cache, summary.fingerprint)) {
      summary.from_cache = true;
      docs = std::move(*cached);
    } else {
      log_info("data: reading {} file(s) of pre-tokenized data ({}); cache {}", config.data.size(),
               format_bytes(data_bytes(config)), summary.cache.string());
      TokenDataOptions options;
      options.vocab_size = model.vocab_size;
      options.skip_malformed = config.skip_malformed;
      TokenDataStats stats;
      docs = load_token_jsonl_files(config.data, options, &stats);
      summary.skipped_malformed = stats.skipped_malformed;
      nlohmann::json info = {{"data", nlohmann::json::array()},
                             {"pre_tokenized", true},
                             {"lines", stats.lines},
                             {"skipped_malformed", stats.skipped_malformed}};
      for (const auto& p : config.data) info["data"].push_back(p.string());
      write_token_cache(summary.cache, summary.fingerprint, docs, info);
    }
    summary.documents = static_cast<int64_t>(docs.size());
    summary.trained_tokens = count_trained(docs, &summary.tokens);
    // Nothing masked: raw token streams (pretraining-style), which split packing may cut.
    summary.plain_text = summary.trained_tokens == summary.tokens;
    log_info("data: {} documents, {} tokens ({} trained){}", summary.documents, summary.tokens,
             summary.trained_tokens, summary.from_cache ? " from the cache " + summary.cache.string() : "");
    if (summary_out) *summary_out = summary;
    return docs;
  }

  const TextSetup setup = load_text_setup(config);
  summary.tokenized = true;
  summary.fingerprint = fingerprint_of(config, model, setup);
  summary.cache = training_cache_root(config) / summary.fingerprint;

  nlohmann::json index;
  if (auto cached = read_token_cache(summary.cache, summary.fingerprint, &index)) {
    summary.from_cache = true;
    const nlohmann::json info = index.value("info", nlohmann::json::object());
    summary.plain_text =
        info.is_object() && only_plain_text(info.value("records_by_format", nlohmann::json::object()));
    summary.documents = static_cast<int64_t>(cached->size());
    summary.trained_tokens = count_trained(*cached, &summary.tokens);
    log_info("data: {} documents, {} tokens ({} trained) from the cache {}", summary.documents,
             summary.tokens, summary.trained_tokens, summary.cache.string());
    if (summary_out) *summary_out = summary;
    return std::move(*cached);
  }

  const TokenizerTextEncoder encoder(*setup.tokenizer);
  TextDataOptions options;
  options.format = *format;
  options.skip_malformed = config.skip_malformed;
  options.train_on_prompt = config.train_on_prompt;
  options.vocab_size = model.vocab_size;
  options.encoder = &encoder;
  options.chat_template = setup.chat_template ? &*setup.chat_template : nullptr;
  options.chat.stop_strings = setup.stop_strings;
  for (const auto& [name, value] : config.chat_template_kwargs.items())
    options.chat.render.extra_variables.emplace_back(name, jinja::from_json(value));
  if (options.chat_template)
    FERRY_CHECK(
        !setup.stop_strings.empty(), kWhere,
        "the tokenizer has no eos token (and generation_config.json no eos_token_id), so the end of an "
        "assistant turn cannot be marked; set eos_token in tokenizer_config.json");
  log_info("data: tokenizing {} file(s) with {} ({}); cache {}", config.data.size(), setup.dir.string(),
           options.chat_template ? "chat template " + options.chat_template->name()
                                 : std::string("no chat template"),
           summary.cache.string());
  TextDataStats stats;
  std::vector<Document> docs = load_text_documents(config.data, options, &stats);
  nlohmann::json info = {{"data", nlohmann::json::array()},
                         {"tokenizer", setup.dir.string()},
                         {"chat_template", options.chat_template ? options.chat_template->name() : ""},
                         {"stop_strings", setup.stop_strings},
                         {"data_format", data_format_name(config.data_format)},
                         {"train_on_prompt", config.train_on_prompt},
                         {"chat_template_kwargs", config.chat_template_kwargs},
                         {"records", stats.records},
                         {"records_by_format", stats.records_by_format},
                         {"skipped_malformed", stats.skipped_malformed},
                         {"eos_inserted", stats.eos_inserted},
                         {"encoded_by_range", stats.encoded_by_range},
                         {"trained_tokens", stats.trained_tokens}};
  for (const auto& p : config.data) info["data"].push_back(p.string());
  write_token_cache(summary.cache, summary.fingerprint, docs, info);
  summary.documents = stats.documents;
  summary.tokens = stats.tokens;
  summary.trained_tokens = stats.trained_tokens;
  summary.skipped_malformed = stats.skipped_malformed;
  summary.plain_text = only_plain_text(nlohmann::json(stats.records_by_format));
  log_info("data: {} records -> {} documents, {} tokens ({} trained); cached in {}", stats.records,
           stats.documents, stats.tokens, stats.trained_tokens, summary.cache.string());
  if (summary_out) *summary_out = summary;
  return docs;
}

TrainingDataSummary prepare_training_data(const TrainConfig& config) {
  FERRY_CHECK(!config.model.empty(), kWhere,
              "no model given; set `model:` to a Hugging Face model directory");
  const ModelConfig model = model_source_config(config.model, config.seed);
  TrainingDataSummary summary;
  load_training_documents(config, model, &summary);
  return summary;
}

}  // namespace ferry
