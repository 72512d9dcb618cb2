// `ferry train`: data → steps → checkpoints → a Hugging Face output directory.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "train/run_evaluation.h"
#include "train/train_config.h"

namespace ferry {

struct StepRecord {
  int64_t step = 0;  // 1-based optimizer step
  int64_t total_steps = 0;
  double loss = 0.0;  // mean over the step's counted tokens
  double lr = 0.0;
  double grad_norm = 0.0;  // before clipping
  int64_t tokens = 0;      // tokens processed (rows * seq_len)
  int64_t counted_tokens = 0;
  double seconds = 0.0;
};

struct TrainHooks {
  std::function<void(const StepRecord&)> on_step;
  // Stop (after saving a checkpoint) once this many steps are done; 0 = run to the end.
  // Simulates an interrupted run in tests.
  int64_t stop_after_steps = 0;
  // Read between steps: nonzero (the signal, e.g. SIGTERM from core/stop_signals.h) stops the run
  // after saving a checkpoint of the last finished step.
  const std::atomic<int>* stop_signal = nullptr;
  // The free bytes of output_dir's file system as the run's start sees them (tests of a full
  // disk); unset: measured (statvfs).
  std::optional<uint64_t> output_free_bytes;
};

struct TrainSummary {
  std::vector<StepRecord> steps;  // the steps this call ran
  int64_t final_step = 0;
  bool finished = false;          // reached the last step and wrote the output directory
  int stop_signal = 0;            // the signal that stopped the run early (hooks.stop_signal), or 0
  bool stopped_early = false;     // early_stopping_patience ended it (its output directory is written)
  std::vector<EvalRecord> evals;  // the evaluations this call ran
};

TrainSummary run_training(const TrainConfig& config, const TrainHooks& hooks = {});

}  // namespace ferry
