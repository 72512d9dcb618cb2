#include "planner/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/boundary_groups.h"

namespace ferry {

const char* placement_name(UnitPlacement p) {
  switch (p) {
    case UnitPlacement::Streamed:
      return "streamed";
    case UnitPlacement::ResidentParams:
      return "resident";
    case UnitPlacement::ResidentWithOptimizer:
      return "resident+optimizer";
    case UnitPlacement::ResidentWithStreamedOptimizer:
      return "resident+streamed-optimizer";
  }
  return "?";
}

const char* activation_name(ActivationPlacement p) {
  switch (p) {
    case ActivationPlacement::KeepOnGpu:
      return "gpu";
    case ActivationPlacement::OffloadToHost:
      return "host";
    case ActivationPlacement::KeepWithInternals:
      return "gpu+internals";
    case ActivationPlacement::OffloadWithInternals:
      return "host+internals";
    case ActivationPlacement::Recompute:
      return "recomputed";
  }
  return "?";
}

const char* weight_upload_name(WeightUpload w) {
  return w == WeightUpload::HostShadow ? "bf16-host-shadow" : "convert-on-upload";
}

const char* update_name(UpdateSchedule s) {
  return s == UpdateSchedule::AfterBackward ? "after-backward" : "during-backward";
}

bool Plan::optimizer_on_gpu() const {
  if (units.empty()) return false;
  for (auto u : units)
    if (u != UnitPlacement::ResidentWithOptimizer) return false;
  return true;
}

int64_t Plan::streamed_optimizer_units() const {
  return std::count(units.begin(), units.end(), UnitPlacement::ResidentWithStreamedOptimizer);
}

int64_t Plan::disk_units() const {
  int64_t n = 0;
  for (bool d : state_on_disk) n += d;
  return n;
}

bool recomputes_boundaries(const Plan& plan) {
  return std::find(plan.activations.begin(), plan.activations.end(), ActivationPlacement::Recompute) !=
         plan.activations.end();
}

bool keeps_any_internals(const Plan& plan) {
  return std::any_of(plan.activations.begin(), plan.activations.end(),
                     [](ActivationPlacement a) { return keeps_internals(a); });
}

std::string sweeps_refusal(const Plan& plan) {
  if (plan.sweeps <= 1) return plan.sweeps == 1 ? std::string() : "sweeps must be at least 1";
  for (auto u : plan.units)
    if (u == UnitPlacement::Streamed)
      return "a plan in sweeps keeps every unit resident (a streamed unit's weights would cross PCIe twice "
             "per sweep, and its gradient has no buffer that lasts the step)";
  for (auto a : plan.activations)
    if (boundary_on_host(a))
      return "a plan in sweeps keeps every boundary activation on the GPU (none offloaded)";
  if (plan.devices > 1) return "a plan in sweeps runs on one device";
  return std::string();
}

std::string head_weight_grad_manner(int64_t chunks) {
  return chunks > 1 ? fmt::format("over {} logits chunks at once", chunks) : "one product per logits chunk";
}

std::string Plan::describe() const {
  int64_t internals = 0, on_host = 0;
  for (auto a : activations) internals += keeps_internals(a);
  for (auto a : activations) on_host += (a == ActivationPlacement::OffloadWithInternals);
  const std::string no_recompute =
      internals > 0 ? fmt::format(", {} of {} layers not recomputed (internals kept{}{})", internals,
                                  activations.size(),
                                  kept_internals == KeptInternals::Products
                                      ? std::string()
                                      : fmt::format(", {}", kept_internals_manner(kept_internals)),
                                  on_host > 0 ? fmt::format(", {} on the host", on_host) : std::string())
                    : std::string();
  const std::string tile =
      (sweeps > 1 ? fmt::format(", in {} sweeps (gradients summed on the GPU)", sweeps) : std::string()) +
      (seq_tile > 0 ? fmt::format(", sequence tiles of {} tokens", seq_tile) : std::string()) +
      (head_groups > 1 ? fmt::format(", attention in {} groups of KV heads", head_groups) : std::string()) +
      (head_weight_grad_chunks > 1
           ? fmt::format(", the head's weight gradient {}", head_weight_grad_manner(head_weight_grad_chunks))
           : std::string());
  int64_t recomputed = 0;
  for (auto a : activations) recomputed += (a == ActivationPlacement::Recompute);
  const std::string groups =
      recomputed > 0 ? fmt::format(", one boundary in {} kept ({} of {} recomputed in the backward)",
                                   boundary_group_size(activations), recomputed, activations.size())
                     : std::string();
  if (optimizer_on_gpu())
    return fmt::format(
        "everything on the GPU (weights {}, fp32 gradients, fp32 masters and AdamW state; GPU AdamW)"
        "{}{}, micro-batch {}{}",
        dtype_name(weight_dtype), no_recompute, groups, micro_batch, tile);
  int64_t resident = 0, with_optimizer = 0, offloaded = 0;
  for (auto u : units) resident += (u != UnitPlacement::Streamed);
  for (auto u : units) with_optimizer += (u == UnitPlacement::ResidentWithOptimizer);
  for (auto a : activations) offloaded += boundary_on_host(a);
  const int64_t streamed_optimizer = streamed_optimizer_units();
  const std::string optimizers =
      streamed_optimizer > 0
          ? fmt::format("{} with their optimizer, {} with it streamed", with_optimizer, streamed_optimizer)
          : fmt::format("{} with their optimizer", with_optimizer);
  return fmt::format(
      "{} slots, {} of {} units resident ({}), {} of {} boundary activations on "
      "the host{}{}, micro-batch {}{}, updates {}, weights {} / gradients {} on the GPU, weights uploaded "
      "{}{}{}{}",
      gpu_slots, resident, units.size(), optimizers, offloaded, activations.size(), no_recompute, groups,
      micro_batch, tile, update_name(update), dtype_name(weight_dtype), dtype_name(grad_dtype),
      weight_upload_name(weight_upload),
      is_exact(optimizer_state)
          ? std::string()
          : fmt::format(", optimizer state {} (lean)", state_format_name(optimizer_state)),
      disk_units() > 0 ? fmt::format(", optimizer state of {} of {} units on disk ({} RAM buffers)",
                                     disk_units(), units.size(), disk_slots)
                       : std::string(),
      devices > 1 ? fmt::format("; on each of {} devices, one host state", devices) : std::string());
}

}  // namespace ferry
