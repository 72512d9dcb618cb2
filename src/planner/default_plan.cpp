#include "planner/default_plan.h"

#include "core/error.h"
#include "planner/memory_model.h"

namespace ferry {

Plan default_plan(const ModelConfig& config, const ModelLayout& layout, const PlanRequest& r) {
  const int64_t L = config.num_layers;
  const int64_t T = r.micro_batch * r.seq_len;
  Plan plan;
  plan.micro_batch = r.micro_batch;
  plan.gpu_slots = r.slots.value_or(2);
  FERRY_CHECK(plan.gpu_slots >= 1, "plan", "gpu_slots must be at least 1");
  plan.weight_dtype = r.weight_dtype;
  plan.grad_dtype = r.grad_dtype;
  plan.update = r.clipping ? UpdateSchedule::AfterBackward : UpdateSchedule::DuringBackward;
  plan.weight_upload = r.weight_upload;
  plan.units.assign(layout.units.size(), UnitPlacement::Streamed);
  if (layout.tied) plan.units[layout.embedding_unit()] = UnitPlacement::ResidentParams;
  plan.activations.assign(static_cast<size_t>(L), ActivationPlacement::OffloadToHost);
  const size_t budget = static_cast<size_t>(static_cast<double>(r.device_budget) * (1.0 - r.headroom));
  auto fits = [&](const Plan& p) { return device_bytes(config, layout, p, T, r.chunks).total() <= budget; };

  if (r.allow_optimizer_on_gpu && r.resident_layers.value_or(L) == L && r.gpu_optimizer_layers.value_or(L) == L &&
      !r.offload_activations.value_or(false)) {
    Plan all = plan;
    all.grad_dtype = DType::F32;  // resident gradients accumulate over micro-chunks in fp32
    all.update = UpdateSchedule::AfterBackward;
    all.units.assign(layout.units.size(), UnitPlacement::ResidentWithOptimizer);
    all.activations.assign(static_cast<size_t>(L), ActivationPlacement::KeepOnGpu);
    if (fits(all)) return all;
  }
  if (!fits(plan)) {
    const size_t minimum = device_bytes(config, layout, plan, T, r.chunks).total();
    fail("plan", "the smallest plan (every unit streamed through {} slots, every activation on the host) needs {} of "
                 "device memory, more than the {} budget allows (with {:.0f}% headroom); give at least {} "
                 "(gpu_memory), or lower micro_batch / seq_len",
         plan.gpu_slots, format_bytes(minimum), format_bytes(r.device_budget), r.headroom * 100,
         format_bytes(static_cast<size_t>(static_cast<double>(minimum) / (1.0 - r.headroom)) + 1));
  }
  if (r.offload_activations.value_or(false) == false) {
    for (int64_t l = L - 1; l >= 0; --l) {
      plan.activations[static_cast<size_t>(l)] = ActivationPlacement::KeepOnGpu;
      if (!fits(plan)) {
        FERRY_CHECK(!r.offload_activations.has_value(), "plan",
                    "keeping every boundary activation on the GPU does not fit the budget; allow offloading");
        plan.activations[static_cast<size_t>(l)] = ActivationPlacement::OffloadToHost;
        break;
      }
    }
  }
  const int64_t wanted = r.resident_layers.value_or(L);
  int64_t resident = 0;
  for (int64_t l = L - 1; l >= 0 && resident < wanted; --l) {
    const size_t u = layout.layer_unit(l);
    plan.units[u] = UnitPlacement::ResidentParams;
    if (!fits(plan)) {
      FERRY_CHECK(!r.resident_layers.has_value(), "plan", "{} resident layers do not fit the budget", wanted);
      plan.units[u] = UnitPlacement::Streamed;
      break;
    }
    ++resident;
  }
  if (r.gpu_optimizer_layers.has_value()) {
    FERRY_CHECK(*r.gpu_optimizer_layers <= resident, "plan",
                "{} layers with their optimizer on the GPU were asked for, but only {} layers are resident; raise "
                "resident_layers or the budget",
                *r.gpu_optimizer_layers, resident);
    for (int64_t l = L - 1; l >= L - *r.gpu_optimizer_layers; --l)
      plan.units[layout.layer_unit(l)] = UnitPlacement::ResidentWithOptimizer;
    FERRY_CHECK(fits(plan), "plan", "{} layers with their optimizer on the GPU do not fit the budget",
                *r.gpu_optimizer_layers);
  }
  if (!r.resident_layers.has_value() && resident == L) {
    for (size_t u : {layout.embedding_unit(), layout.head_unit()}) {
      if (plan.units[u] == UnitPlacement::ResidentParams) continue;
      plan.units[u] = UnitPlacement::ResidentParams;
      if (!fits(plan)) plan.units[u] = UnitPlacement::Streamed;
    }
  }
  return plan;
}

}  // namespace ferry
