#include "engine/engine_buffers.h"

#include <algorithm>
#include <cstring>

#include "core/arena.h"
#include "core/error.h"
#include "optim/clip.h"
#include "planner/boundary_groups.h"
#include "planner/memory_model.h"

namespace ferry {

namespace {

size_t round_up(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

UnitRoles::UnitRoles(const ModelLayout& layout, const Plan& plan) {
  const size_t units = layout.units.size();
  resident.assign(units, false);
  device_updated.assign(units, false);
  for (size_t u = 0; u < units; ++u) {
    resident[u] = plan.units[u] != UnitPlacement::Streamed;
    device_updated[u] = updated_on_device(plan.units[u]);
  }
}

DType UnitRoles::grad_dtype(size_t unit, const Plan& plan) const {
  return plan.units[unit] == UnitPlacement::ResidentWithOptimizer ? DType::F32 : plan.grad_dtype;
}

bool UnitRoles::any_device_updated() const {
  return std::find(device_updated.begin(), device_updated.end(), true) != device_updated.end();
}

EngineBuffers::EngineBuffers(Device& device, const ModelConfig& config, const ModelLayout& layout,
                             const Plan& plan, const UnitRoles& roles, int64_t chunk_tokens,
                             int64_t max_chunks) {
  const size_t units = layout.units.size();
  const int64_t L = config.num_layers;
  const DType wd = plan.weight_dtype, gd = plan.grad_dtype;
  size_t largest_streamed = 0;
  for (size_t u = 0; u < units; ++u)
    if (!roles.resident[u])
      largest_streamed = std::max(largest_streamed, static_cast<size_t>(layout.units[u].numel));

  // Everything the device must hold, measured first so that a budget that is too small is refused
  // with the numbers before anything is allocated.
  // Activations hold one sweep's micro-chunks (Plan::sweeps), the token arrays the step's.
  const size_t T = static_cast<size_t>(chunk_tokens), C = static_cast<size_t>(sweep_chunks(plan, max_chunks));
  const size_t H = static_cast<size_t>(config.hidden_size);
  const size_t act_bytes = round_up(C * T * H * dtype_size(wd));
  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, config, chunk_tokens, wd, true, plan.seq_tile, plan.head_groups);
  carve_head_scratch(measure, config, chunk_tokens, wd, plan.seq_tile);
  const size_t scratch_bytes = measure.used() + Arena::kAlignment;
  slot_param_bytes = round_up(largest_streamed * dtype_size(wd));
  slot_grad_bytes = round_up(largest_streamed * dtype_size(gd));
  const bool any_streamed = largest_streamed > 0;
  const int64_t slots = any_streamed ? plan.gpu_slots : 0;
  bool any_offloaded = false;
  for (auto a : plan.activations) any_offloaded |= boundary_on_host(a);
  const size_t token_bytes =
      round_up(kStepTokenArrays * static_cast<size_t>(max_chunks) * T * sizeof(int32_t));
  const size_t needed = device_bytes(config, layout, plan, chunk_tokens, max_chunks).total();
  const MemoryStats mem = device.memory();
  if (needed > mem.capacity - std::min(mem.capacity, mem.in_use)) {
    fail("engine",
         "the plan needs {:.2f} GiB of device memory ({} slots of {:.2f} GiB, activations, workspace) but "
         "{:.2f} GiB of the {:.2f} GiB budget are free; lower micro_batch or seq_len, keep fewer units "
         "resident, offload activations, or raise gpu_memory",
         needed / 1073741824.0, slots, (slot_param_bytes + slot_grad_bytes) / 1073741824.0,
         (mem.capacity - std::min(mem.capacity, mem.in_use)) / 1073741824.0, mem.capacity / 1073741824.0);
  }

  for (int64_t s = 0; s < slots; ++s) {
    slot_params.emplace_back(device, slot_param_bytes, "slot weights");
    slot_grads.emplace_back(device, slot_grad_bytes, "slot gradients");
  }
  resident_params.resize(units);
  resident_grads.resize(units);
  for (size_t u = 0; u < units; ++u) {
    if (!roles.resident[u]) continue;
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    resident_params[u] = DeviceBuffer(device, round_up(n * dtype_size(wd)), "resident weights");
    resident_grads[u] =
        DeviceBuffer(device, round_up(n * dtype_size(roles.grad_dtype(u, plan))), "resident gradients");
  }
  kept_activations.resize(static_cast<size_t>(L));
  host_activations.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    const ActivationPlacement a = plan.activations[static_cast<size_t>(l)];
    if (boundary_on_gpu(a))
      kept_activations[static_cast<size_t>(l)] = DeviceBuffer(device, act_bytes, "boundary activation");
    else if (boundary_on_host(a))
      host_activations[static_cast<size_t>(l)] = PinnedBuffer(device, act_bytes, "offloaded activation");
  }
  for (int64_t r = 0; r < boundary_groups(plan.activations).recompute_buffers; ++r)
    recompute_activations.emplace_back(device, act_bytes, "recomputed activation");
  if (any_offloaded) {
    for (int64_t s = 0; s < boundary_groups(plan.activations, plan.one_staging_buffer).staging_buffers; ++s)
      staging_activations[s] = DeviceBuffer(device, act_bytes, "activation staging");
  }
  // KeepWithInternals: each micro-chunk's kept intermediates in a slice of their own, sized as the
  // memory model sizes them (layer_internals_bytes).
  internals_bytes = layer_internals_bytes(config, chunk_tokens, wd, plan.kept_internals);
  const bool any_internals = keeps_any_internals(plan);
  FERRY_ASSERT(plan.seq_tile <= 0 || plan.seq_tile >= chunk_tokens || !any_internals,
               "a plan with sequence tiles keeps no layer internals (whole chunks)");
  FERRY_ASSERT(plan.head_groups == 1 || !any_internals,
               "a plan with head groups keeps no layer internals (every head's)");
  const auto carve_chunks = [&](void* base, std::vector<LayerScratch>& out) {
    for (size_t c = 0; c < C; ++c) {
      Arena slice(static_cast<char*>(base) + c * internals_bytes, internals_bytes);
      out.push_back(carve_kept_internals(slice, config, chunk_tokens, wd, plan.kept_internals));
    }
  };
  internals_buffers.resize(static_cast<size_t>(L));
  kept_internals.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    if (plan.activations[static_cast<size_t>(l)] != ActivationPlacement::KeepWithInternals) continue;
    DeviceBuffer& buffer = internals_buffers[static_cast<size_t>(l)];
    buffer = DeviceBuffer(device, static_cast<size_t>(C) * internals_bytes, "layer internals");
    carve_chunks(buffer.data(), kept_internals[static_cast<size_t>(l)]);
  }
  host_internals.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l)
    if (plan.activations[static_cast<size_t>(l)] == ActivationPlacement::OffloadWithInternals)
      host_internals[static_cast<size_t>(l)] =
          PinnedBuffer(device, static_cast<size_t>(C) * internals_bytes, "offloaded layer internals");
  for (int64_t r = 0; r < boundary_groups(plan.activations).internals_staging_buffers; ++r) {
    internals_staging[r] =
        DeviceBuffer(device, static_cast<size_t>(C) * internals_bytes, "layer internals staging");
    carve_chunks(internals_staging[r].data(), staged_internals[r]);
  }
  if (const size_t pieces = conversion_staging_elements(layout, plan); pieces > 0)
    conversion_staging = DeviceBuffer(device, round_up(pieces * sizeof(float)), "fp32 weight upload staging");
  head_input = DeviceBuffer(device, act_bytes, "head input");
  chunk_grads =
      DeviceBuffer(device, activation_gradient_bytes(config, layout, plan, chunk_tokens, max_chunks),
                   "activation gradients");
  scratch = DeviceBuffer(device, scratch_bytes, "layer scratch");
  Arena arena(scratch.data(), scratch_bytes);
  layer_scratch = carve_layer_scratch(arena, config, chunk_tokens, wd, true, plan.seq_tile, plan.head_groups);
  head_scratch = carve_head_scratch(arena, config, chunk_tokens, wd, plan.seq_tile);
  head_scratch.weight_grad_chunks = plan.head_weight_grad_chunks;
  tokens = DeviceBuffer(device, token_bytes, "token ids");
  tokens_host = PinnedBuffer(device, token_bytes, "token staging");
  loss = DeviceBuffer(device, 256, "loss");
  loss_host = PinnedBuffer(device, 256, "loss readback");

  const std::vector<float> frequencies = rope_inv_freq(config);
  inv_freq = DeviceBuffer(device, round_up(frequencies.size() * sizeof(float)), "rope frequencies");
  PinnedBuffer inv_host(device, frequencies.size() * sizeof(float), "rope staging");
  std::memcpy(inv_host.data(), frequencies.data(), frequencies.size() * sizeof(float));
  device.copy_to_device(inv_freq.data(), inv_host.data(), frequencies.size() * sizeof(float),
                        StreamKind::HostToDevice);
  device.synchronize(device.record(StreamKind::HostToDevice));

  host_partial_offset.assign(units, 0);
  for (size_t u = 0; u < units; ++u) {
    if (roles.device_updated[u]) continue;
    host_partial_offset[u] = host_partial_count;
    host_partial_count += grad_norm_partials(layout.units[u]);
  }
  if (host_partial_count > 0) {
    host_unit_partials =
        DeviceBuffer(device, round_up(host_partial_count * sizeof(double)), "gradient norm partials");
    host_unit_partials_host =
        PinnedBuffer(device, host_partial_count * sizeof(double), "gradient norm partials readback");
  }
}

void* EngineBuffers::shared_row_gradients() const {
  for (const PinnedBuffer& b : host_activations)
    if (b.data() != nullptr) return b.data();
  return nullptr;
}

}  // namespace ferry
