// `ferry eval`: loss and perplexity of a model on pre-tokenized data, optionally writing the
// logits of the first rows (for comparing with transformers: tools/check_hf_output.py).
#pragma once

#include <filesystem>
#include <vector>

namespace ferry {

struct EvalOptions {
  std::filesystem::path model;
  std::vector<std::filesystem::path> data;
  int64_t seq_len = 2048;
  int64_t micro_batch = 1;
  bool packing = true;
  int64_t max_rows = 0;               // 0: all rows
  std::filesystem::path dump_logits;  // when set: input_ids, position_ids, logits of the first rows
  int64_t dump_rows = 2;
  int64_t threads = 0;
};

struct EvalResult {
  double loss = 0.0;        // mean cross-entropy over counted tokens
  double perplexity = 0.0;
  int64_t rows = 0;
  int64_t counted_tokens = 0;
};

EvalResult run_eval(const EvalOptions& options);

}  // namespace ferry
