#include "train/run_evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/clock.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "engine/step_batch.h"
#include "io/atomic_file.h"
#include "train/training_data.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "eval";

// The best loss recorded in output_dir/best by an earlier part of this run (resume), if any.
std::optional<double> saved_best_loss(const std::filesystem::path& output_dir) {
  const std::filesystem::path path = output_dir / kBestModelDir / kBestModelRecord;
  if (!std::filesystem::exists(path)) return std::nullopt;
  const nlohmann::json record = parse_json(read_text_file(path, kWhere), kWhere, path.string(),
                                           "remove the best/ folder to start the best model afresh");
  if (!json_has(record, "eval_loss", &nlohmann::json::is_number)) return std::nullopt;
  return record["eval_loss"].get<double>();
}

}  // namespace

std::vector<Document> evaluation_documents(const TrainConfig& config, const ModelConfig& model,
                                           std::vector<Document>& training) {
  if (!config.eval_data.empty()) {
    TrainConfig eval = config;
    eval.data = config.eval_data;
    std::vector<Document> documents = load_training_documents(eval, model);
    FERRY_CHECK(!documents.empty(), kWhere, "eval_data holds no documents; check the files in `eval_data:`");
    return documents;
  }
  if (config.val_split <= 0) return {};
  const size_t n = training.size();
  const size_t held =
      std::min(n - 1, static_cast<size_t>(std::llround(config.val_split * static_cast<double>(n))));
  FERRY_CHECK(
      n >= 2 && held >= 1, kWhere,
      "val_split {} of {} documents holds out none (or all); give more documents, a larger val_split, or "
      "eval_data",
      config.val_split, n);
  // A seeded choice of documents, the same every run with the same data and seed (resume relies
  // on it), independent of the training order's shuffle.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(config.seed ^ 0x5eedfe77a1u);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> held_out(n, false);
  for (size_t i = 0; i < held; ++i) held_out[order[i]] = true;
  std::vector<Document> eval, kept;
  for (size_t i = 0; i < n; ++i) (held_out[i] ? eval : kept).push_back(std::move(training[i]));
  training = std::move(kept);
  log_info("val_split {}: {} of {} documents held out for evaluation", config.val_split, held, n);
  return eval;
}

RunEvaluation::RunEvaluation(const TrainConfig& config, std::vector<PackedRow> rows)
    : config_(config), rows_(std::move(rows)), padding_(padding_row(config.seq_len)) {
  if (enabled() && config.save_best) best_ = saved_best_loss(config.output_dir);
}

bool RunEvaluation::due(int64_t step, int64_t total_steps) const {
  if (!enabled()) return false;
  return step == total_steps || (config_.eval_steps > 0 && step % config_.eval_steps == 0);
}

EvalRecord RunEvaluation::run(int64_t step, StepExecutor& executor, int64_t rows_per_batch,
                              int64_t micro_batch) {
  const auto start = std::chrono::steady_clock::now();
  double loss_sum = 0.0;
  int64_t counted = 0;
  std::vector<const PackedRow*> batch_rows;
  for (size_t begin = 0; begin < rows_.size(); begin += static_cast<size_t>(rows_per_batch)) {
    batch_rows.clear();
    for (size_t r = begin; r < std::min(rows_.size(), begin + static_cast<size_t>(rows_per_batch)); ++r)
      batch_rows.push_back(&rows_[r]);
    while (batch_rows.size() % static_cast<size_t>(micro_batch) != 0) batch_rows.push_back(&padding_);
    const StepBatch batch = make_step_batch(batch_rows, config_.seq_len, micro_batch);
    const StepLoss loss = executor.evaluate(batch);
    loss_sum += loss.loss_sum;
    counted += loss.counted_tokens;
  }
  FERRY_CHECK(counted > 0, kWhere, "every target of the evaluation data is masked; nothing to evaluate");
  EvalRecord record;
  record.step = step;
  record.loss = loss_sum / static_cast<double>(counted);
  record.perplexity = std::exp(record.loss);
  record.rows = static_cast<int64_t>(rows_.size());
  record.counted_tokens = counted;
  record.seconds = seconds_since(start);
  FERRY_CHECK(
      std::isfinite(record.loss), kWhere,
      "the evaluation loss after step {} is not finite; lower learning_rate (the last checkpoint is intact)",
      step);
  record.best = !best_ || record.loss < *best_;
  if (record.best) {
    best_ = record.loss;
    since_best_ = 0;
  } else {
    ++since_best_;
  }
  log_info("eval after step {} | loss {:.4f} | perplexity {:.3f} | {} rows, {} targets | {:.1f} s{}", step,
           record.loss, record.perplexity, record.rows, record.counted_tokens, record.seconds,
           record.best ? " | best so far" : "");
  return record;
}

bool RunEvaluation::patience_exhausted() const {
  return config_.early_stopping_patience > 0 && since_best_ >= config_.early_stopping_patience;
}

void write_best_record(const std::filesystem::path& best_dir, const EvalRecord& record) {
  const nlohmann::json j = {{"step", record.step},
                            {"eval_loss", record.loss},
                            {"eval_perplexity", record.perplexity},
                            {"eval_rows", record.rows}};
  write_file_atomic(best_dir / kBestModelRecord, j.dump(2) + "\n");
}

}  // namespace ferry
