// The training configuration: one YAML file plus key=value overrides (`ferry train CONFIG.yaml
// lr=1e-5 max_steps=100`). Names follow Hugging Face TrainingArguments / LLaMA-Factory where
// they have one. Unknown keys are errors, so a typo never silently falls back to a default.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "core/dtype.h"
#include "data/record_formats.h"
#include "device/trace/trace_budget.h"
#include "optim/lr_schedule.h"
#include "planner/plan.h"

namespace ferry {

// Where a run computes: the fp32 reference trainer (cpu), the simulated device (sim), a GPU
// (cuda), or cuda where a GPU answers and sim otherwise (auto; train/device_choice.h).
enum class DeviceKind { Auto, Cpu, Sim, Cuda };
const char* device_kind_name(DeviceKind kind);

// Where the run's scalars go besides the log and metrics.jsonl (report.html is always written).
enum class ReportTo { None, TensorBoard };

// Which layers' boundary activations go to host memory: the planner's choice, every layer's, none.
enum class ActivationOffload { Auto, All, None };
// auto: the planner keeps layers' forward intermediates where memory is left (no recompute in
// their backward); all: every layer recomputes its forward in the backward.
enum class RecomputePolicy { Auto, All };
// How packing fills rows (data/packing.h): split for plain text and best fit (never splitting an
// example) for everything else (auto), or one of them for all data.
enum class PackingStrategy { Auto, BestFit, Split };

struct TrainConfig {
  // what to train, on what, and where the result goes
  std::filesystem::path model;              // Hugging Face model directory
  std::vector<std::filesystem::path> data;  // .jsonl / .json / .txt files (data/text_dataset.h)
  // Auto detects each file's format from its first record (.txt files are text).
  DataFormat data_format = DataFormat::Auto;
  std::filesystem::path output_dir;
  bool skip_malformed = false;          // skip (and count) malformed records instead of failing
  bool train_on_prompt = false;         // train on every token, not only what the assistant produces
  std::filesystem::path tokenizer;      // tokenizer directory or tokenizer.json; empty: the model's
  std::filesystem::path chat_template;  // a .jinja file (or tokenizer_config.json) replacing the model's
  // More variables for the chat template, as apply_chat_template(**kwargs) takes them: a mapping,
  // e.g. {enable_thinking: false} for Qwen3.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::filesystem::path cache_dir;  // tokenized data cache; empty: <output_dir>/.cache

  // batch geometry
  int64_t seq_len = 2048;    // tokens per sequence (cutoff_len)
  int64_t global_batch = 8;  // sequences per optimizer step
  // Sequences per micro-chunk inside a layer; 0 (`auto`, the default): the planner picks the fastest
  // divisor of global_batch that fits (the CPU device, which has no plan, runs 1).
  int64_t micro_batch = 0;
  // Tokens per sequence tile inside a layer (model/decoder_layer.h: the MLP, projections, norms and
  // head run a tile at a time, attention over the whole sequence): -1 (`auto`): the planner picks;
  // 0 (`off`): untiled.
  int64_t seq_tile = -1;
  // One boundary activation in this many kept (on the GPU or the host), the others recomputed in
  // the backward from the kept one below (planner/boundary_groups.h): -1 (`auto`): the planner
  // picks; 1: every boundary kept.
  int64_t keep_every = -1;
  // Sweeps of a step's micro-chunks through the whole resident model (Plan::sweeps): -1 (`auto`):
  // the planner picks; 1: none (layer-major over the whole step); N: every plan runs N.
  int64_t sweeps = -1;
  // Groups of KV heads a layer's attention runs in, one at a time (model/decoder_layer.h): -1
  // (`auto`): the planner picks; 1: all heads at once; else a divisor of the model's KV heads.
  int64_t head_groups = -1;
  // Hugging Face's way to give the batch: global_batch = micro_batch (per_device_train_batch_size)
  // × gradient_accumulation_steps. 0: not given. Set, it decides global_batch (a global_batch given
  // too must agree).
  int64_t gradient_accumulation_steps = 0;
  bool packing = true;  // pack documents into sequences (with document masking)
  PackingStrategy packing_strategy = PackingStrategy::Auto;
  bool shuffle = true;  // a fresh order every epoch; false: the data's order

  // evaluation: held-out loss and perplexity during and after training (train/run_evaluation.h)
  std::vector<std::filesystem::path> eval_data;  // files read as `data` is; or
  double val_split = 0.0;                        // this share of the documents of `data`, held out (seeded)
  int64_t eval_steps = 0;               // evaluate every this many optimizer steps; 0: only at the end
  bool save_best = false;               // keep the model of the best evaluation in output_dir/best
  int64_t early_stopping_patience = 0;  // stop after this many evaluations without a better loss; 0: never

  // length of training
  int64_t max_steps = 0;  // 0: derived from epochs
  double epochs = 1.0;

  // optimizer and schedule (torch.optim.AdamW + transformers schedules)
  double learning_rate = 2e-5;
  LrSchedule lr_scheduler_type = LrSchedule::Cosine;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;  // used when warmup_steps is 0
  double min_lr_ratio = 0.0;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // 0 disables clipping
  bool decay_norms_and_biases = false;
  // How the host keeps masters, m and v (optim/state_format.h): fp32, exact, by default; a lean
  // format only when the config names one.
  OptimizerStateFormat optimizer_state = OptimizerStateFormat::Fp32;

  // bookkeeping
  uint64_t seed = 42;
  int64_t logging_steps = 1;
  ReportTo report_to =
      ReportTo::None;            // tensorboard: event files in output_dir/runs (train/tensorboard_log.h)
  int64_t save_steps = 0;        // 0: save only at the end
  int64_t save_total_limit = 2;  // checkpoints kept (0: keep all)
  bool resume = false;           // continue from the newest complete checkpoint in output_dir
  // A fresh run into a non-empty output_dir is refused unless this is set; then the earlier run's
  // metrics and checkpoints are removed first (train/output_dir_claim.h).
  bool overwrite_output_dir = false;
  std::optional<DType> save_dtype;  // dtype of the output weights; empty (auto): the input's
  int64_t max_shard_bytes = 5ll << 30;

  // execution
  DeviceKind device = DeviceKind::Auto;
  std::optional<int64_t> gpu_memory;  // bytes ("24GiB"); bounds the (simulated) GPU; empty: all of it
  // Devices that train together with one host state (engine/device_group_engine.h): on cuda the
  // first `gpus` visible GPUs (0, written `auto`: every visible one), on sim that many simulated
  // devices. Each runs global_batch / gpus sequences a step, so global_batch must be a multiple of
  // micro_batch x gpus. gpu_memory bounds each device.
  int64_t gpus = 1;
  // Bytes ("200GiB"); bounds the whole process's host memory; empty: what the machine has available
  // less a margin (train/plan_selection.h).
  std::optional<int64_t> host_memory;
  // The disk tier of optimizer state (engine/disk_state_tier.h): at most disk_memory bytes
  // ("100GiB") in a scratch file under disk_dir, used when host_memory cannot hold the state; the
  // planner chooses how much goes there. 0 (the default): no disk tier. The file is removed when
  // the run ends; checkpoints hold the state as ever.
  int64_t disk_memory = 0;
  std::filesystem::path disk_dir;
  int64_t disk_layers = -1;  // layers whose state is forced onto disk; -1: the planner chooses
  int64_t gpu_slots = 0;     // GPU slots for streamed units; 0: the planner chooses
  ActivationOffload offload_activations = ActivationOffload::Auto;
  // Whether the planner may send layers' forward internals to pinned host memory instead of
  // recomputing them (ActivationPlacement::OffloadWithInternals); false (the default): never.
  bool internals_on_host = false;
  // The planner may stream some host-updated layers' optimizer state through the GPU for its AdamW
  // in a plan in sweeps (UnitPlacement::ResidentWithStreamedOptimizer).
  bool streamed_optimizer = true;
  // Whether layers that keep their forward internals may keep the norms' outputs too
  // (Plan::kept_internals), where memory is left; false: the norms run again in their backward.
  bool keep_norm_outputs = true;
  // Whether such layers that keep the norms' outputs may keep the SwiGLU activation as well, where
  // the best plan has the room for it as it stands; false: their SwiGLU backward writes it again.
  bool keep_activation = true;
  // Whether the head's weight gradient may be taken over several logits chunks at once
  // (Plan::head_weight_grad_chunks), where the best plan has the device memory for them as it
  // stands; false: one product per chunk.
  bool group_head_weight_grad = true;
  RecomputePolicy recompute = RecomputePolicy::Auto;
  int64_t resident_layers = -1;  // layers kept on the GPU; -1: the planner chooses
  // When the CPU updates a unit; empty (auto): the planner's choice. During-backward is exact only
  // without clipping, so it is refused with max_grad_norm > 0.
  std::optional<UpdateSchedule> update_schedule;
  // How new weights reach the GPU (a constraint of the search); empty (auto): the planner's choice.
  std::optional<WeightUpload> weight_upload;
  int64_t threads = 0;  // CPU threads; 0 = all cores

  // A timeline trace (Chrome trace JSON) of these optimizer steps; empty: none, at no cost. The
  // default step 3 comes after the first steps' one-time work (first touches, GEMM heuristics).
  std::filesystem::path trace;
  std::vector<int64_t> trace_steps = {3};
  // The host memory the trace may hold, which the host plan counts beside the engine.
  int64_t trace_memory = static_cast<int64_t>(kTraceHostBytes);
  // A machine profile saved by `ferry profile` (planner/profile.h), to plan for the machine it was
  // measured on; empty: this machine's, measured once per model shape and cached.
  std::filesystem::path profile;
};

// Reads the YAML file (may be empty) and applies "key=value" overrides; validates everything.
// Relative paths in the file are relative to the file's folder; on the command line, to the
// working directory (where the shell completed them).
TrainConfig load_train_config(const std::filesystem::path& yaml_path,
                              const std::vector<std::string>& overrides);
// Parses YAML text (for tests and the demo). `source` names it in errors.
TrainConfig parse_train_config(const std::string& yaml_text, const std::vector<std::string>& overrides,
                               const std::string& source);
// Checks values and combinations; throws ferry::Error naming the key and what to do.
void validate_train_config(const TrainConfig& config);

// Every key a config may set (not the aliases), sorted by name.
std::vector<std::string> train_config_keys();

}  // namespace ferry
