#include "train/plan_selection.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/host_memory.h"
#include "device/memory_ledger.h"

namespace ferry {

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

PlanRequest plan_request(const TrainConfig& config, const PlanTarget& target, double ram_bytes) {
  PlanRequest r;
  r.seq_len = config.seq_len;
  r.global_batch = config.global_batch;
  if (config.micro_batch > 0) r.micro_batch = config.micro_batch;
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
  r.host_beside_engine = target.host_beside_engine;
  r.device_memory_on_host = target.device_memory_on_host;
  r.weight_dtype = target.weight_dtype;
  r.grad_dtype = target.weight_dtype;  // with a bf16 host shadow they land in its buffer (unit_updater.h)
  r.clipping = config.max_grad_norm > 0;
  if (config.gpu_slots > 0) r.slots = config.gpu_slots;
  if (config.offload_activations != ActivationOffload::Auto)
    r.offload_activations = config.offload_activations == ActivationOffload::All;
  if (config.resident_layers >= 0) r.resident_layers = config.resident_layers;
  r.update = config.update_schedule;
  r.weight_upload = config.weight_upload;
  r.optimizer_state = config.optimizer_state;
  r.allow_optimizer_on_gpu = target.gpu_adamw;
  // The engine runs AdamW on the device for any subset of units (engine/device_optimizer.h).
  r.space.per_unit_gpu_optimizer = target.gpu_adamw;
  r.space.keep_internals = config.recompute == RecomputePolicy::Auto;
  return r;
}

PlanSelection select_plan(const TrainConfig& config, const ModelConfig& model, const ModelLayout& layout,
                          const PlanTarget& target, MachineProfile profile, std::string source,
                          size_t alternatives) {
  PlanSelection s;
  s.profile = std::move(profile);
  s.profile_source = std::move(source);
  s.request = plan_request(config, target, s.profile.host.memory_bytes);
  s.result = search_plans(model, layout, s.profile, s.request, alternatives);
  s.advice = idle_advice(model, layout, s.profile, s.request, s.result.best.prediction);
  return s;
}

std::string describe_selection(const PlanSelection& s) {
  const Prediction& p = s.result.best.prediction;
  return fmt::format("plan: {}; predicted step {:.4g} s ({:.0f} tokens/s), {} (profile: {})",
                     s.result.best.plan.describe(), p.step_seconds, p.tokens_per_second,
                     lane_name(p.bottleneck), s.profile_source);
}

std::vector<std::string> describe_advice(const PlanSelection& s) {
  std::vector<std::string> lines;
  if (s.advice.empty()) return lines;
  const Prediction& p = s.result.best.prediction;
  lines.push_back(fmt::format("GPU idle {:.0f}% of the step waits for the CPU AdamW{}; predicted with",
                              100.0 * p.gpu_idle_fraction,
                              s.request.clipping ? " after the global norm (clipping)" : ""));
  for (const IdleAdvice& a : s.advice)
    lines.push_back(fmt::format("  {} ({}): {:.0f} tokens/s, GPU idle {:.0f}%", a.setting, a.effect,
                                a.prediction.tokens_per_second, 100.0 * a.prediction.gpu_idle_fraction));
  return lines;
}

}  // namespace ferry
