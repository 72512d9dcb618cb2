// From a training config to the plan the engine runs: the one path `ferry train` and `ferry plan`
// share, so that what `ferry plan` prints is what `ferry train` does with the same config.
//
//   1. the machine profile: `profile: FILE`, else this device's cached or freshly measured one
//      (train/profile_cache.h obtain_profile); `ferry plan --nominal` plans with the nominal
//      rates of the lent H200 machine instead (planner/nominal_profile.h);
//   2. the budgets: the device's memory or gpu_memory, and host_memory, else the physical RAM the
//      profile records less a margin (planner/search.h default_host_budget);
//   3. the forced options of the config (micro_batch, gpu_slots, offload_activations,
//      resident_layers) as constraints of the search (planner/search.h);
//   4. the search: the fastest plan that fits, its prediction and the next best alternatives;
//   5. where that plan leaves the GPU waiting for the CPU AdamW, the settings that would not; where
//      the config fixes a micro-batch that the planner would not pick, how much faster its own is.
#pragma once

#include <optional>
#include <string>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/eval_cost.h"
#include "planner/idle_advice.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "train/train_config.h"

namespace ferry {

// The device a config trains on, for planning: cuda or sim (cpu has no plan).
struct PlanTarget {
  std::string device;                // "cuda" | "sim"
  DType weight_dtype = DType::BF16;  // what the engine holds on that device (bf16 on CUDA, fp32 on sim)
  size_t device_budget = 0;          // bytes the engine may allocate
  // Where device_budget came from, as the plan's report names it.
  std::string device_budget_source = "gpu_memory";
  bool gpu_adamw = false;  // the device runs AdamW (CUDA)
  // Host memory this machine can give the run now, its own included (core/host_memory.h); 0:
  // unknown (planning for a machine known by a profile), the default budget then comes from the
  // profile's physical RAM.
  size_t host_available = 0;
  std::string host_available_source;   // what bounds it: "MemAvailable", a cgroup's limit
  size_t host_beside_engine = 0;       // PlanRequest::host_beside_engine
  bool device_memory_on_host = false;  // PlanRequest::device_memory_on_host (sim)
  // Bytes free under disk_dir on this machine (statvfs), which bounds the disk tier's budget;
  // unknown when planning for a machine known by a profile (disk_memory alone bounds it then).
  std::optional<size_t> disk_free;
  // Devices training together (config `gpus`, `auto` resolved): device_budget is each one's.
  int64_t devices = 1;
};

struct PlanSelection {
  MachineProfile profile;
  std::string profile_source;  // the file, or "nominal rates (...)"
  PlanRequest request;
  SearchResult result;
  std::vector<IdleAdvice> advice;  // settings that would keep the GPU busy (planner/idle_advice.h)
  // With micro_batch fixed by the config: the search's best plan with it left to the planner, when
  // that is faster by more than kMicroBatchAdviceMargin (the config's choice stands; the log says).
  std::optional<Candidate> auto_micro_batch;
  std::vector<std::string> disk_lines;  // the disk tier: where the state is, its traffic, why (describe_disk)
  EvalPrediction evaluation;            // the chosen plan's forward-only batch (planner/eval_cost.h)
};

// Host memory beside the engine (PlanRequest::host_beside_engine): what the process holds at
// planning time less the loaded fp32 weights (they become the masters), plus an allowance for
// what comes later and no plan counts buffer by buffer (thread stacks, the ops' host-side
// handles, a checkpoint's conversion pieces). Measured on the lent H200: 132 MiB with the CUDA
// context and an 8B model's 16 MB of tokens.
inline constexpr size_t kHostGrowthAllowance = size_t{256} << 20;

// How much faster the planner's own micro-batch must be predicted before the log says so.
inline constexpr double kMicroBatchAdviceMargin = 0.03;
struct HostBeside {
  size_t own = 0;      // counted resident memory now (core/host_memory.h)
  size_t weights = 0;  // of it, the loaded fp32 weights
  size_t bytes = 0;    // the rest, with the allowance
};
HostBeside measure_host_beside(size_t loaded_weight_bytes);

// Sets target.host_beside_engine from measure_host_beside and, when the plan is for this machine
// (not a profile file's or the nominal one), target.host_available from what it can give now.
// `train` and `plan` both fill their targets here, so that they plan the same host budget.
HostBeside fill_host_target(PlanTarget& target, size_t loaded_weight_bytes, bool this_machine);

// For a disk tier on this machine (disk_memory > 0): creates disk_dir, removes the state files of
// runs that died there (io/scratch_file.h), and sets target.disk_free from what is free now.
void fill_disk_target(PlanTarget& target, const TrainConfig& config, bool this_machine);

// The search's request for `config` on `target`: its forced options and budgets. Without
// `host_memory`, the host budget is what target.host_available leaves (default_host_budget_available),
// else what `ram_bytes` of physical memory leaves (default_host_budget); with neither, none.
PlanRequest plan_request(const TrainConfig& config, const PlanTarget& target, double ram_bytes);

// 2–4 above, with the profile of 1 (`source` says where it came from, for the log). Throws
// ferry::Error when no plan fits (with the budgets that would). With a disk tier on this machine
// and a profile without disk rates, the rates are measured under disk_dir first. The chosen plan
// and the alternatives carry disk_dir.
PlanSelection select_plan(const TrainConfig& config, const ModelConfig& model, const ModelLayout& layout,
                          const PlanTarget& target, MachineProfile profile, std::string source,
                          size_t alternatives = 4);

// One line for the log: the plan, its predicted step time and tokens/s, the bottleneck.
std::string describe_selection(const PlanSelection& selection);

// The disk tier's lines (planner/disk_spill.h describe_disk_tier); none without one.
std::vector<std::string> describe_disk(const PlanSelection& selection);

// What an evaluation costs, for `ferry plan` and the log: "evaluation: every 200 steps and at the end,
// forward only, predicted 0.61 s per batch of 16384 tokens (37 s per million tokens)"; empty when
// the config evaluates nothing (no eval_data, no val_split). The evaluation set's size is known
// only once the data is read: ferry train logs it with the prediction for the whole set.
std::string describe_evaluation(const TrainConfig& config, const PlanSelection& selection);

// The advice, one line each (none without advice): "micro_batch 1 is the config's; micro_batch: auto would
// run micro-batch 32: 69432 tokens/s against 61353 (+13%)", and "GPU idle 8% waits for the CPU AdamW
// after the global norm; predicted with global_batch: 32 (65536 tokens a step): 22731 tokens/s, GPU idle
// 0%".
std::vector<std::string> describe_advice(const PlanSelection& selection);

}  // namespace ferry
