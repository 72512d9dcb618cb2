#include "planner/memory_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/arena.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"

namespace ferry {

size_t round_to_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

DeviceBytes device_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan, int64_t chunk_tokens,
                         int64_t chunks) {
  const size_t wd = dtype_size(plan.weight_dtype), gd = dtype_size(plan.grad_dtype);
  DeviceBytes b;
  size_t largest_streamed = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    if (plan.units[u] == UnitPlacement::ResidentParams) b.resident += round_to_256(n * wd) + round_to_256(n * gd);
    if (plan.optimizer_on_gpu) b.resident += 3 * round_to_256(n * sizeof(float));
    else largest_streamed = std::max(largest_streamed, n);
  }
  if (largest_streamed > 0)
    b.slots = static_cast<size_t>(plan.gpu_slots) * (round_to_256(largest_streamed * wd) + round_to_256(largest_streamed * gd));
  const size_t act = round_to_256(static_cast<size_t>(chunks * chunk_tokens * config.hidden_size) * wd);
  bool offloaded = false;
  for (auto a : plan.activations) {
    if (a == ActivationPlacement::KeepOnGpu) b.activations += act;
    else offloaded = true;
  }
  if (offloaded) b.activations += 2 * act;  // staging ring
  b.activations += 2 * act;                 // head input, activation gradients
  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, config, chunk_tokens, plan.weight_dtype, true);
  carve_head_scratch(measure, config, chunk_tokens, plan.weight_dtype);
  b.scratch = measure.used() + Arena::kAlignment;
  b.other = round_to_256(4 * static_cast<size_t>(chunks * chunk_tokens) * sizeof(int32_t)) +
            round_to_256(static_cast<size_t>(config.head_dim) * 2) + 256;
  return b;
}

HostBytes host_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan, int64_t chunk_tokens,
                     int64_t chunks) {
  HostBytes h;
  size_t params = 0;
  for (const auto& u : layout.units) params += static_cast<size_t>(u.numel);
  h.optimizer = params * 12;
  h.pinned = params * (dtype_size(plan.weight_dtype) + dtype_size(plan.grad_dtype));
  const size_t act = static_cast<size_t>(chunks * chunk_tokens * config.hidden_size) * dtype_size(plan.weight_dtype);
  for (auto a : plan.activations)
    if (a == ActivationPlacement::OffloadToHost) h.pinned += act;
  return h;
}


}  // namespace ferry
