// The documents a run trains on, from the config's data files: text formats are tokenized once, with
// the model's tokenizer and chat template, and pre-tokenized files parsed once; both are cached as
// token shards (data/token_cache.h) under
//
//   <cache_dir>/<fingerprint>/        cache_dir defaults to <output_dir>/.cache
//
// The fingerprint is the SHA-256 of everything that shapes the tokens: tokenizer.json and
// tokenizer_config.json (bytes), the chat template text, the stop strings, each data file's
// extension and bytes (in order; the digests are remembered by size and mtime, data/file_digest.h),
// data_format, chat_template_kwargs, train_on_prompt, skip_malformed, the model's
// vocabulary size and the version of ferry's data processing. Any change makes a new cache; the
// same inputs always find the old one, so reruns and resumes never tokenize again.
//
// Which tokenizer and template: `tokenizer:` (a directory or tokenizer.json; default the model
// directory) and `chat_template:` (a .jinja file or a tokenizer_config.json; default the
// tokenizer's, see tokenizer/chat_template.h). Stop strings, which end an assistant turn
// (data/chat_text.h), are the tokenizer's eos token and the eos_token_id entries of the model's
// generation_config.json (Llama 3.1's <|eot_id|> and <|eom_id|>, say).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/document.h"
#include "data/packing.h"
#include "model/model_config.h"
#include "train/train_config.h"

namespace ferry {

struct TrainingDataSummary {
  bool tokenized = false;       // text formats (false: pre-tokenized files)
  bool from_cache = false;      // the documents came from an existing cache
  std::string fingerprint;      // of the cache
  std::filesystem::path cache;  // the cache directory
  // Only plain text (the text format, .txt files; pre-tokenized data with nothing masked): documents
  // that may be split across rows. Otherwise the documents are examples, never split (packing_mode).
  bool plain_text = false;
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;     // labels that are not -100
  int64_t skipped_malformed = 0;  // when the cache was built by this call, or pre-tokenized data
};

// The documents to train on (see above). Throws ferry::Error for missing files, a tokenizer that does
// not fit the model, malformed records (unless skip_malformed) and the like.
std::vector<Document> load_training_documents(const TrainConfig& config, const ModelConfig& model,
                                              TrainingDataSummary* summary = nullptr);

// `ferry tokenize --data`: makes sure the cache of `config`'s data exists, building it when needed,
// without training. Reads the model's config.json (for the vocabulary size) but no weights.
TrainingDataSummary prepare_training_data(const TrainConfig& config);

// How `config` packs these documents: none without packing; packing_strategy when set; auto: split
// for plain text, best fit for examples (data/packing.h).
PackingMode packing_mode(const TrainConfig& config, const TrainingDataSummary& data);

// The directory tokenized data of `config` is cached under (<cache_dir>, or <output_dir>/.cache).
std::filesystem::path training_cache_root(const TrainConfig& config);

}  // namespace ferry
