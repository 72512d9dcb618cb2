#include "train/plan_selection.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "device/memory_ledger.h"
#include "io/filesystem_id.h"
#include "io/scratch_file.h"
#include "planner/disk_batch.h"
#include "planner/disk_spill.h"
#include "profiler/disk_rate.h"
#include "train/disk_rate_cache.h"
#include "train/profile_cache.h"

namespace ferry {

namespace {

// The disk probe, once per filesystem (train/disk_rate_cache.h): large enough for the drive's sustained rate,
// small enough to take seconds.
constexpr size_t kDiskProbeBytes = size_t{256} << 20;

}  // namespace

HostBeside measure_host_beside(size_t loaded_weight_bytes) {
  HostBeside b;
  b.weights = loaded_weight_bytes;
  const auto now = read_process_memory();
  b.own = now ? now->counted() : b.weights;
  b.bytes = b.own - std::min(b.own, b.weights) + kHostGrowthAllowance;
  return b;
}

HostBeside fill_host_target(PlanTarget& target, size_t loaded_weight_bytes, bool this_machine) {
  const HostBeside beside = measure_host_beside(loaded_weight_bytes);
  target.host_beside_engine = beside.bytes;
  if (this_machine) {
    const HostMemoryAvailable available = host_memory_available(beside.own);
    target.host_available = available.bytes;
    target.host_available_source = available.source;
  }
  return beside;
}

void fill_disk_target(PlanTarget& target, const TrainConfig& config, bool this_machine) {
  if (config.disk_memory <= 0 || !this_machine) return;
  std::error_code ec;
  std::filesystem::create_directories(config.disk_dir, ec);
  FERRY_CHECK(!ec, "disk tier", "cannot create disk_dir {}: {}; give a directory you can write",
              config.disk_dir.string(), ec.message());
  // A dead run's file would otherwise hold space this run's plan is refused for.
  remove_stale_scratch_files(config.disk_dir);
  target.disk_free = free_disk_bytes(config.disk_dir);
}

PlanRequest plan_request(const TrainConfig& config, const PlanTarget& target, double ram_bytes) {
  PlanRequest r;
  r.seq_len = config.seq_len;
  r.global_batch = config.global_batch;
  if (target.devices > 1) {
    // Each device plans its share of the step; they update every unit on the host, from the one
    // bf16 staging (engine/device_share.h).
    FERRY_CHECK(config.global_batch % target.devices == 0, "plan",
                "global_batch ({}) must be a multiple of gpus ({}): each device runs an equal share",
                config.global_batch, target.devices);
    FERRY_CHECK(
        config.weight_upload.value_or(WeightUpload::HostShadow) == WeightUpload::HostShadow, "plan",
        "gpus: {} uploads weights from the bf16 host staging; weight_upload: convert-on-upload is for "
        "one device (use weight_upload: auto)",
        target.devices);
    r.devices = target.devices;
    r.global_batch = config.global_batch / target.devices;
  }
  if (config.micro_batch > 0) r.micro_batch = config.micro_batch;
  if (config.seq_tile >= 0) r.seq_tile = config.seq_tile;
  if (config.keep_every >= 1) r.keep_every = config.keep_every;
  if (config.sweeps >= 1) r.sweeps = config.sweeps;
  if (config.head_groups >= 1) r.head_groups = config.head_groups;
  r.device_budget = target.device_budget;
  if (config.host_memory) r.host_budget = static_cast<size_t>(*config.host_memory);
  if (!config.host_memory && target.host_available > 0) {
    r.host_budget = default_host_budget_available(target.host_available);
    r.host_budget_source =
        fmt::format("the default: {} that this machine can give now ({}), less 5%, at least 2 GiB",
                    format_bytes(target.host_available), target.host_available_source);
  } else if (!config.host_memory && ram_bytes > 0) {
    r.host_budget = default_host_budget(ram_bytes);
    r.host_budget_source = fmt::format("the default: the profile's {} of RAM less 10%, at least 4 GiB",
                                       format_bytes(static_cast<size_t>(ram_bytes)));
  }
  // A trace holds its spans beside the engine, within what it is given (device/trace/tracer.h).
  r.host_beside_engine =
      target.host_beside_engine + (config.trace.empty() ? 0 : static_cast<size_t>(config.trace_memory));
  r.disk_budget = static_cast<size_t>(config.disk_memory);
  if (config.disk_layers >= 0) r.disk_layers = config.disk_layers;
  if (target.disk_free && *target.disk_free < r.disk_budget) {
    log_info("disk tier: disk_dir {} has {} free, less than disk_memory {}; the plan uses at most that",
             config.disk_dir.string(), format_bytes(*target.disk_free), format_bytes(r.disk_budget));
    r.disk_budget = *target.disk_free;
    r.disk_budget_source =
        fmt::format("what is free in disk_dir {} (disk_memory is {}): free space there",
                    config.disk_dir.string(), format_bytes(static_cast<size_t>(config.disk_memory)));
  }
  r.device_memory_on_host = target.device_memory_on_host;
  r.weight_dtype = target.weight_dtype;
  r.grad_dtype = target.weight_dtype;  // with a bf16 host shadow they land in its buffer (unit_updater.h)
  r.clipping = config.max_grad_norm > 0;
  if (config.gpu_slots > 0) r.slots = config.gpu_slots;
  if (config.offload_activations != ActivationOffload::Auto)
    r.offload_activations = config.offload_activations == ActivationOffload::All;
  if (config.resident_layers >= 0) r.resident_layers = config.resident_layers;
  r.space.internals_on_host = config.internals_on_host;
  r.space.streamed_optimizer = config.streamed_optimizer;
  r.update = config.update_schedule;
  r.weight_upload = config.weight_upload;
  r.optimizer_state = config.optimizer_state;
  r.allow_optimizer_on_gpu = target.gpu_adamw && r.devices == 1;
  // The engine runs AdamW on the device for any subset of units (engine/device_optimizer.h); not
  // on several devices, which share one host state.
  r.space.per_unit_gpu_optimizer = r.allow_optimizer_on_gpu;
  if (r.devices > 1) {
    r.space.convert_on_upload = false;
    r.weight_upload = WeightUpload::HostShadow;
  }
  r.space.keep_internals = config.recompute == RecomputePolicy::Auto;
  r.space.most_kept_internals = !config.keep_norm_outputs ? KeptInternals::Products
                                : !config.keep_activation ? KeptInternals::WithNorms
                                                          : KeptInternals::WithActivation;
  r.space.group_head_weight_grad = config.group_head_weight_grad;
  return r;
}

PlanSelection select_plan(const TrainConfig& config, const ModelConfig& model, const ModelLayout& layout,
                          const PlanTarget& target, MachineProfile profile, std::string source,
                          size_t alternatives) {
  PlanSelection s;
  s.profile = std::move(profile);
  s.profile_source = std::move(source);
  s.request = plan_request(config, target, s.profile.host.memory_bytes);
  // On this machine the disk is disk_dir's, whatever disk the profile measured (its cache's): its
  // rates come from the per-filesystem cache, measured once (train/disk_rate_cache.h).
  if (s.request.disk_budget > 0 && target.disk_free) {
    const DiskRates rates = obtain_disk_rates(config.disk_dir, filesystem_id(config.disk_dir),
                                              default_cache_dir("disk-rates"), kDiskProbeBytes);
    s.profile.host.disk_read_bytes_per_s = rates.read_bytes_per_s;
    s.profile.host.disk_write_bytes_per_s = rates.write_bytes_per_s;
  }
  s.result = search_plans(model, layout, s.profile, s.request, alternatives);
  s.result.best.plan.disk_dir = config.disk_dir.string();
  for (Candidate& c : s.result.alternatives) c.plan.disk_dir = config.disk_dir.string();
  s.disk_lines = describe_disk_tier(layout, s.result.best.plan, s.profile, s.result.best.prediction,
                                    s.result.best.shape.tokens(), s.request.host_budget,
                                    s.request.disk_layers.has_value(), config.seq_len);
  // Disk-bound: the larger steps that fit the same budgets, each the search's answer
  // (planner/disk_batch.h), so that the advice to raise global_batch names only steps that fit.
  // The plan keeps the config's global_batch; changing it changes the training, so it is the user's.
  if (!s.disk_lines.empty() && s.result.best.prediction.bottleneck == Lane::Disk) {
    const std::vector<std::string> larger =
        describe_disk_batch_options(disk_batch_options(model, layout, s.profile, s.request), config.seq_len);
    if (!larger.empty())
      s.disk_lines.push_back(fmt::format(
          "larger steps under the same budgets (the plan keeps global_batch {}):", config.global_batch));
    for (const std::string& line : larger) s.disk_lines.push_back("  " + line);
  }
  s.advice = idle_advice(model, layout, s.profile, s.request, s.result.best.prediction);
  if (s.request.micro_batch) {
    PlanRequest free = s.request;
    free.micro_batch.reset();
    std::optional<Candidate> planners = best_plan_if_any(model, layout, s.profile, free);
    if (planners && planners->prediction.tokens_per_second >
                        (1.0 + kMicroBatchAdviceMargin) * s.result.best.prediction.tokens_per_second)
      s.auto_micro_batch = std::move(planners);
  }
  s.evaluation = predict_evaluation(model, layout, s.result.best.plan, s.profile, s.result.best.shape);
  return s;
}

std::string describe_evaluation(const TrainConfig& config, const PlanSelection& s) {
  if (config.eval_data.empty() && config.val_split <= 0) return "";
  const EvalPrediction& e = s.evaluation;
  return fmt::format(
      "evaluation: {} ({}), forward only, predicted {:.3g} s per batch of {} tokens ({:.3g} s per million "
      "tokens)",
      config.eval_steps > 0 ? fmt::format("every {} steps and at the end", config.eval_steps)
                            : std::string("at the end"),
      config.eval_data.empty() ? fmt::format("val_split {:g} of the data", config.val_split)
                               : std::string("eval_data"),
      e.batch_seconds, e.batch_tokens,
      e.batch_seconds * 1e6 / static_cast<double>(std::max<int64_t>(1, e.batch_tokens)));
}

std::string describe_selection(const PlanSelection& s) {
  const Prediction& p = s.result.best.prediction;
  return fmt::format("plan: {}; predicted step {:.4g} s ({:.0f} tokens/s), {} (profile: {})",
                     s.result.best.plan.describe(), p.step_seconds, p.tokens_per_second,
                     lane_name(p.bottleneck), s.profile_source);
}

std::vector<std::string> describe_disk(const PlanSelection& s) {
  return s.disk_lines;
}

std::vector<std::string> describe_advice(const PlanSelection& s) {
  std::vector<std::string> lines;
  const Prediction& p = s.result.best.prediction;
  if (s.auto_micro_batch)
    lines.push_back(fmt::format(
        "micro_batch {} is the config's; micro_batch: auto would run micro-batch {}: {:.0f} tokens/s against "
        "{:.0f} (+{:.0f}%)",
        s.result.best.plan.micro_batch, s.auto_micro_batch->plan.micro_batch,
        s.auto_micro_batch->prediction.tokens_per_second, p.tokens_per_second,
        100.0 * (s.auto_micro_batch->prediction.tokens_per_second / p.tokens_per_second - 1.0)));
  if (s.advice.empty()) return lines;
  lines.push_back(fmt::format("GPU idle {:.0f}% of the step waits for the CPU AdamW{}; predicted with",
                              100.0 * p.gpu_idle_fraction,
                              s.request.clipping ? " after the global norm (clipping)" : ""));
  for (const IdleAdvice& a : s.advice)
    lines.push_back(fmt::format("  {} ({}): {:.0f} tokens/s, GPU idle {:.0f}%", a.setting, a.effect,
                                a.prediction.tokens_per_second, 100.0 * a.prediction.gpu_idle_fraction));
  return lines;
}

}  // namespace ferry
