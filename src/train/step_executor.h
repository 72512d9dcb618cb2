// What the training loop asks of whatever runs the steps: the plain in-memory trainer on the CPU
// backend, or the sliding engine on a Device (simulated or CUDA) following a Plan. Both hold the
// fp32 masters and AdamW state per unit, which is what checkpoints save and resume restores.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "engine/model_step.h"
#include "engine/step_batch.h"
#include "model/model_weights.h"
#include "optim/adamw.h"
#include "planner/eval_cost.h"
#include "train/checkpoint.h"
#include "train/host_memory_watch.h"
#include "train/run_summary.h"
#include "train/train_config.h"

namespace ferry {

struct ExecutedStep {
  double loss = 0.0;  // mean over counted tokens
  int64_t counted_tokens = 0;
  double grad_norm = 0.0;
};

struct DeviceMemoryUse {
  MemoryStats device;
  MemoryStats pinned;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual std::string describe() const = 0;
  // Runs optimizer step `step` (1-based). The update may still be in flight when it returns.
  virtual ExecutedStep step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper,
                            double max_grad_norm) = 0;
  // Waits for every update in flight; afterwards masters/m/v are current.
  virtual void finish_updates() = 0;
  // Forward only: the summed loss of `batch` (cut into micro_batch() rows per micro-chunk, at
  // most a step's rows) under the weights of every step run so far; the state is not touched.
  virtual StepLoss evaluate(const StepBatch& batch) = 0;
  // Per-unit fp32 buffers (laid out by the model layout). With a lean optimizer_state, masters()
  // are decoded copies (refreshed by each call; what the HF model is written from) and exp_avg(),
  // exp_avg_sq() are empty: the state is lean_state(). A unit whose state is not in RAM (the disk
  // tier's) is nullptr here and has no lean arrays: it is reached through streamed_state().
  virtual std::vector<float*> masters() = 0;
  virtual std::vector<float*> exp_avg() = 0;
  virtual std::vector<float*> exp_avg_sq() = 0;
  virtual OptimizerStateFormat state_format() const = 0;
  // A lean format's arrays per unit, state_arrays(format) order, each state_array_bytes long:
  // what checkpoints save and resume restores.
  virtual std::vector<std::vector<std::span<std::byte>>> lean_state() = 0;
  // The units left out above, one at a time (train/checkpoint.h); empty functions when none is.
  virtual StreamedState streamed_state() { return {}; }
  // Masters/m/v (or the lean state) were replaced (resume) as of optimizer step `step`.
  virtual void state_loaded(int64_t step) = 0;
  // Sequences per micro-chunk the steps' batches must be cut into: the config's micro_batch, or
  // the planner's choice when the config leaves it (`micro_batch: auto`).
  virtual int64_t micro_batch() const = 0;
  // The plan's predicted step time, for the first time estimates; 0 without a plan (cpu).
  virtual double predicted_step_seconds() const { return 0.0; }
  // The plan's predicted forward-only batch (planner/eval_cost.h); empty without a plan (cpu).
  virtual EvalPrediction predicted_evaluation() const { return {}; }
  // The device's memory and the pinned host memory it holds (in use and peak); none on cpu.
  virtual std::optional<DeviceMemoryUse> device_memory() const { return std::nullopt; }
  // The exact CPU AdamW's rate in the steps so far beside the profile's (run_summary.h); none
  // without a plan, with a lean state, before a second of whole-unit passes was timed, or where a
  // unit timed is small enough for its pass to run from the CPU's caches.
  virtual std::optional<CpuAdamWRates> cpu_adamw_rates() { return std::nullopt; }
};

// Chooses the executor from `device` (cpu | sim | cuda | auto); on a device, the plan comes from
// the planner's search (train/plan_selection.h), whose choice and predicted step time are logged.
// Takes ownership of the weights. With a `watch`, the run's phases get the plan's host memory
// (train/host_memory_watch.h), and building the engine is its phase "state commit".
std::unique_ptr<StepExecutor> make_step_executor(const TrainConfig& config, ModelWeights weights,
                                                 HostMemoryWatch* watch = nullptr);

}  // namespace ferry
