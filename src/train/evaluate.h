// `ferry eval`: loss and perplexity of a model on data as `ferry train` reads it (pre-tokenized, or
// text formats tokenized with the model's tokenizer and chat template, loss on the targets
// training would use, packed as training packs it: best-fit rows for chat and instruction data, split
// rows for plain text), on the device a training run would use (forward only), optionally writing the logits
// of the first rows (for comparing with transformers: tools/check_hf_output.py).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "data/packing.h"

namespace ferry {

struct EvalOptions {
  std::filesystem::path model;
  std::vector<std::filesystem::path> data;
  // As TrainConfig's keys of the same names (train/training_data.h).
  std::string data_format = "auto";
  std::filesystem::path tokenizer, chat_template;
  bool train_on_prompt = false;
  // Tokenized text data is cached here; empty: default_cache_dir("data") (train/profile_cache.h).
  std::filesystem::path cache_dir;
  int64_t seq_len = 2048;
  int64_t micro_batch = 1;
  // As train's packing and packing_strategy, so that an evaluation sees the rows a training run of
  // the same data would: best-fit for chat and instruction data, split for plain text (auto).
  bool packing = true;
  std::string packing_strategy = "auto";
  int64_t max_rows = 0;               // 0: all rows
  std::filesystem::path dump_logits;  // when set: input_ids, position_ids, logits of the first rows
  int64_t dump_rows = 2;
  int64_t threads = 0;
  // As train's device and gpu_memory: auto runs on the GPU where one answers, through the sliding
  // engine and a plan, as training does; cpu (and any logits dump) runs the fp32 reference.
  std::string device = "auto";
  std::string gpu_memory;
};

struct EvalResult {
  double loss = 0.0;  // mean cross-entropy over counted tokens
  double perplexity = 0.0;
  int64_t rows = 0;
  int64_t counted_tokens = 0;
  PackingMode packing = PackingMode::Split;  // how the rows were packed (PackingMode)
};

// "best_fit", "split", "none": as packing_strategy spells them.
const char* packing_mode_name(PackingMode mode);

EvalResult run_eval(const EvalOptions& options);

}  // namespace ferry
