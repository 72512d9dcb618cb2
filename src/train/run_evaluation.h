// Evaluation in a run (eval_data or val_split): the held-out rows go through the same executor as
// the steps -- forward only, on the run's device, plan and buffers -- and their loss and
// perplexity are logged and written to metrics.jsonl every eval_steps and at the end. The best
// evaluation's model is kept in output_dir/best (save_best), and early_stopping_patience
// evaluations without a better loss end the run (its output directory is written as at the end).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "data/document.h"
#include "data/packing.h"
#include "model/model_config.h"
#include "train/step_executor.h"
#include "train/train_config.h"

namespace ferry {

inline constexpr const char* kBestModelDir = "best";          // in output_dir (save_best)
inline constexpr const char* kBestModelRecord = "best.json";  // in it: the step and the loss

// The documents to evaluate on: eval_data's, read as `data` is, or val_split of `training` (the
// same share every run with the same seed, removed from `training`). Empty without either.
std::vector<Document> evaluation_documents(const TrainConfig& config, const ModelConfig& model,
                                           std::vector<Document>& training);

struct EvalRecord {
  int64_t step = 0;
  double loss = 0.0;  // mean cross-entropy over the counted targets
  double perplexity = 0.0;
  int64_t rows = 0;
  int64_t counted_tokens = 0;
  double seconds = 0.0;
  bool best = false;  // better than every evaluation before it in this run (and the saved best)
};

class RunEvaluation {
 public:
  // `rows`: the packed evaluation rows (none: evaluation is off). The best loss so far is read
  // from output_dir/best when a resumed run finds one there.
  RunEvaluation(const TrainConfig& config, std::vector<PackedRow> rows);

  bool enabled() const { return !rows_.empty(); }
  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  // Whether optimizer step `step` (1-based) of `total_steps` is followed by an evaluation.
  bool due(int64_t step, int64_t total_steps) const;
  // Evaluates after step `step`, in batches of at most `rows_per_batch` rows cut into micro-chunks
  // of `micro_batch` rows; logs the result.
  EvalRecord run(int64_t step, StepExecutor& executor, int64_t rows_per_batch, int64_t micro_batch);
  // early_stopping_patience evaluations in a row have not improved on the best.
  bool patience_exhausted() const;
  std::optional<double> best_loss() const { return best_; }

 private:
  const TrainConfig& config_;
  std::vector<PackedRow> rows_;
  PackedRow padding_;  // fills a last micro-chunk (counts nothing)
  std::optional<double> best_;
  int64_t since_best_ = 0;  // evaluations since the best
};

// Writes `record` as the best model's record in output_dir/best (beside the model written there).
void write_best_record(const std::filesystem::path& best_dir, const EvalRecord& record);

}  // namespace ferry
