#include "planner/memory_model.h"

#include <algorithm>

#include "core/arena.h"
#include "io/safetensors_writer.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "ops/cuda_ops_sizes.h"
#include "optim/clip.h"
#include "optim/host_array.h"
#include "planner/boundary_groups.h"
#include "planner/disk_tier_layout.h"

namespace ferry {

size_t round_to_256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

size_t cuda_ops_workspace_bytes(const ModelConfig& c, int64_t chunk_tokens, DType grad_dtype,
                                int64_t head_groups, int64_t head_weight_grad_chunks) {
  const size_t T = static_cast<size_t>(chunk_tokens);
  const size_t H = static_cast<size_t>(c.hidden_size), F = static_cast<size_t>(c.intermediate_size);
  const size_t q_dim = static_cast<size_t>(c.q_dim());
  const size_t kv_dim = static_cast<size_t>(c.kv_dim());
  size_t bytes = kCudaGemmWorkspaceBytes;  // cuBLASLt workspace
  // Cross-entropy: bf16 logits of one chunk of tokens (or of a group of chunks for the weight
  // gradient's product), rows padded to Vp.
  const size_t Vp = (static_cast<size_t>(c.vocab_size) + 7) / 8 * 8;
  const size_t flce_tokens = static_cast<size_t>(fused_cross_entropy_logits_rows(
      kCudaFlceChunkBytes, c.vocab_size, chunk_tokens, head_weight_grad_chunks));
  bytes += round_to_256(2 * flce_tokens * Vp) + round_to_256(4 * T);
  // Attention: the flash backward's delta and fp32 dq, or cuDNN's fused attention's, for one
  // group's query heads (decoder_layer.h: head groups).
  bytes += attention_workspace_bytes(chunk_tokens, static_cast<int>(c.num_heads / head_groups), c.head_dim);
  bytes += round_to_256(32 * T);  // embedding backward: keys, values, CUB storage
  bytes += round_to_256(4 * 1024 * std::max({H, q_dim, kv_dim}));  // rmsnorm dweight / linear dbias partials
  if (grad_dtype != DType::F32) bytes += round_to_256(2 * std::max({H * F, H * q_dim, H * kv_dim}));
  return bytes;
}

size_t grad_norm_partials(const UnitLayout& unit) {
  size_t count = 0;
  for (const auto& p : unit.params) count += grad_sumsq_chunks(static_cast<size_t>(p.numel));
  return count;
}

size_t layer_internals_bytes(const ModelConfig& config, int64_t chunk_tokens, DType weight_dtype,
                             KeptInternals kept) {
  Arena measure = Arena::measuring();
  carve_kept_internals(measure, config, chunk_tokens, weight_dtype, kept);
  return round_to_256(measure.used() + Arena::kAlignment);
}

bool row_sparse_embedding(const ModelLayout& layout, const Plan& plan) {
  if (layout.tied || plan.units[layout.embedding_unit()] == UnitPlacement::ResidentWithOptimizer)
    return false;
  // A lean format's rows must be whole quantization blocks (lean_adamw_rows).
  const auto& table = layout.units[layout.embedding_unit()].params[0].shape;
  return is_exact(plan.optimizer_state) ||
         (table.size() == 2 && static_cast<size_t>(table[1]) % kStateBlock == 0);
}

namespace {

// The mapped bytes of the arrays of `format` that `counted` picks, for a unit of `numel` elements.
template <typename Pick>
size_t mapped_arrays_bytes(OptimizerStateFormat format, size_t numel, Pick counted) {
  size_t bytes = 0;
  for (const StateArraySpec& a : state_arrays(format))
    if (counted(a.kind))
      bytes += HostArray::mapped_bytes(host_array_floats(state_array_bytes(a.kind, numel)));
  return bytes;
}

}  // namespace

size_t state_mapped_bytes(OptimizerStateFormat format, size_t numel) {
  return mapped_arrays_bytes(format, numel, [](StateArrayKind) { return true; });
}

size_t master_mapped_bytes(OptimizerStateFormat format, size_t numel) {
  return mapped_arrays_bytes(format, numel, [](StateArrayKind k) {
    return k == StateArrayKind::MasterF32 || k == StateArrayKind::MasterBf16 ||
           k == StateArrayKind::Compensation8;
  });
}

int64_t max_embedding_rows(const ModelConfig& config, int64_t chunk_tokens, int64_t chunks) {
  return std::min(config.vocab_size, chunk_tokens * chunks);
}

bool row_gradients_share_an_offloaded_boundary(const Plan& plan) {
  return std::any_of(plan.activations.begin(), plan.activations.end(), boundary_on_host);
}

size_t host_unit_norm_partials(const ModelLayout& layout, const Plan& plan) {
  size_t count = 0;
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (!updated_on_device(plan.units[u])) count += grad_norm_partials(layout.units[u]);
  return count;
}

GradientLanding gradient_landing(const ModelLayout& layout, const Plan& plan) {
  GradientLanding g;
  const size_t units = layout.units.size();
  g.in_ring.assign(units, false);
  g.dedicated.assign(units, false);
  if (plan.weight_upload != WeightUpload::ConvertOnUpload) return g;
  const bool sparse = row_sparse_embedding(layout, plan);
  auto lands_whole = [&](size_t u) {
    return !updated_on_device(plan.units[u]) && !(sparse && u == layout.embedding_unit());
  };
  if (plan.update == UpdateSchedule::DuringBackward) {
    for (size_t u = 0; u < units; ++u)
      if (lands_whole(u) && u != layout.embedding_unit() && u != layout.head_unit())
        g.ring_elements = std::max(g.ring_elements, static_cast<size_t>(layout.units[u].numel));
  }
  size_t ring_units = 0;
  for (size_t u = 0; u < units; ++u) {
    if (!lands_whole(u)) continue;
    if (static_cast<size_t>(layout.units[u].numel) <= g.ring_elements) {
      g.in_ring[u] = true;
      ++ring_units;
    } else {
      g.dedicated[u] = true;
    }
  }
  g.ring_buffers = std::min(kGradientRingBuffers, ring_units);
  return g;
}

size_t conversion_staging_elements(const ModelLayout& layout, const Plan& plan) {
  if (plan.weight_upload != WeightUpload::ConvertOnUpload) return 0;
  size_t largest = 0;
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (!updated_on_device(plan.units[u]))
      largest = std::max(largest, static_cast<size_t>(layout.units[u].numel));
  return std::min(largest, kConversionStagingElements);
}

size_t GpuOptimizerBytes::streamed_ring_bytes() const {
  return kStreamedStateSlots * 3 * round_to_256(streamed_piece * sizeof(float));
}

GpuOptimizerBytes gpu_optimizer_bytes(const ModelLayout& layout, const Plan& plan) {
  GpuOptimizerBytes g;
  size_t largest = 0, largest_streamed = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (!updated_on_device(plan.units[u])) continue;
    g.partials += grad_norm_partials(layout.units[u]);
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    if (plan.units[u] == UnitPlacement::ResidentWithOptimizer)
      largest = std::max(largest, n);
    else
      largest_streamed = std::max(largest_streamed, n);
  }
  g.staging_elements = std::min(largest, kStateStagingElements);
  const size_t piece =
      plan.streamed_state_piece > 0 ? static_cast<size_t>(plan.streamed_state_piece) : kStreamedStatePiece;
  g.streamed_piece = std::min(largest_streamed, piece);
  return g;
}

size_t activation_gradient_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                                 int64_t chunk_tokens, int64_t chunks) {
  const size_t H = static_cast<size_t>(config.hidden_size);
  const size_t sweep =
      static_cast<size_t>(sweep_chunks(plan, chunks) * chunk_tokens) * H * dtype_size(plan.weight_dtype);
  const size_t rows = row_sparse_embedding(layout, plan)
                          ? static_cast<size_t>(max_embedding_rows(config, chunk_tokens, chunks)) * H *
                                dtype_size(plan.grad_dtype)
                          : 0;
  return round_to_256(std::max(sweep, rows));
}

DeviceBytes device_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                         int64_t chunk_tokens, int64_t chunks) {
  const size_t wd = dtype_size(plan.weight_dtype), gd = dtype_size(plan.grad_dtype);
  DeviceBytes b;
  size_t largest_streamed = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    switch (plan.units[u]) {
      case UnitPlacement::Streamed:
        largest_streamed = std::max(largest_streamed, n);
        break;
      case UnitPlacement::ResidentParams:
      case UnitPlacement::ResidentWithStreamedOptimizer:  // the state's ring below
        b.resident += round_to_256(n * wd) + round_to_256(n * gd);
        break;
      case UnitPlacement::ResidentWithOptimizer:  // weights, fp32 gradients, fp32 master, m, v
        b.resident += round_to_256(n * wd) + 4 * round_to_256(n * sizeof(float));
        break;
    }
  }
  // Slots are sized to the largest unit that passes through them (sliding_engine.cpp).
  if (largest_streamed > 0)
    b.slots = static_cast<size_t>(plan.gpu_slots) *
              (round_to_256(largest_streamed * wd) + round_to_256(largest_streamed * gd));
  // Activations hold one sweep's micro-chunks (Plan::sweeps; the step's, in one sweep).
  const int64_t held = sweep_chunks(plan, chunks);
  const size_t act = round_to_256(static_cast<size_t>(held * chunk_tokens * config.hidden_size) * wd);
  const size_t layer_internals =
      layer_internals_bytes(config, chunk_tokens, plan.weight_dtype, plan.kept_internals);
  for (auto a : plan.activations) {
    if (boundary_on_gpu(a)) b.activations += act;
    if (a == ActivationPlacement::KeepWithInternals)
      b.activations += static_cast<size_t>(held) * layer_internals;
  }
  // Offloaded boundaries' staging (one or two buffers), recomputed boundaries: one buffer per
  // position in the longest group, and internals on the host: their ring of one or two layers'
  // internals (planner/boundary_groups.h).
  const BoundaryGroups groups = boundary_groups(plan.activations, plan.one_staging_buffer);
  b.activations += static_cast<size_t>(groups.staging_buffers + groups.recompute_buffers) * act;
  b.activations += static_cast<size_t>(groups.internals_staging_buffers * held) * layer_internals;
  b.activations += act + activation_gradient_bytes(config, layout, plan, chunk_tokens, chunks);  // head input
  Arena measure = Arena::measuring();
  // With sequence tiles the token-local tensors are (seq_tile, width), the attention's full-length.
  // With head groups q, k, v and their gradients are one group's (decoder_layer.h).
  carve_layer_scratch(measure, config, chunk_tokens, plan.weight_dtype, true, plan.seq_tile,
                      plan.head_groups);
  carve_head_scratch(measure, config, chunk_tokens, plan.weight_dtype, plan.seq_tile);
  b.scratch = measure.used() + Arena::kAlignment;
  b.other = round_to_256(kStepTokenArrays * static_cast<size_t>(chunks * chunk_tokens) * sizeof(int32_t)) +
            round_to_256(static_cast<size_t>(config.head_dim) * 2) + 256;
  const GpuOptimizerBytes g = gpu_optimizer_bytes(layout, plan);
  if (g.partials > 0) b.other += round_to_256(g.partials * sizeof(double)) + 256;  // partials; norm, clip
  b.other += g.streamed_ring_bytes();
  const size_t conversion = conversion_staging_elements(layout, plan);
  if (conversion > 0) b.other += round_to_256(conversion * sizeof(float));  // ConvertOnUpload's fp32 pieces
  const size_t host_partials = host_unit_norm_partials(layout, plan);
  if (host_partials > 0) b.other += round_to_256(host_partials * sizeof(double));  // computed before each d2h
  // bf16 weights run on the CUDA ops (the only bf16 backend); fp32 weights on the CPU reference
  // ops of the simulated device, which keep no working memory of their own.
  // The bf16 weight-gradient sum serves layers whose gradients are bf16; units with their
  // optimizer on the GPU accumulate fp32 gradients directly.
  bool bf16_layer_grads = false;
  for (int64_t l = 0; l < config.num_layers; ++l)
    bf16_layer_grads |= plan.grad_dtype != DType::F32 &&
                        plan.units[layout.layer_unit(l)] != UnitPlacement::ResidentWithOptimizer;
  if (plan.weight_dtype == DType::BF16)
    b.ops_workspace =
        cuda_ops_workspace_bytes(config, chunk_tokens, bf16_layer_grads ? plan.grad_dtype : DType::F32,
                                 plan.head_groups, plan.head_weight_grad_chunks);
  return b;
}

size_t lean_save_scratch_bytes(const ModelLayout& layout, const Plan& plan) {
  if (is_exact(plan.optimizer_state)) return 0;
  size_t largest = 0;
  for (const UnitLayout& unit : layout.units)
    for (const auto& p : unit.params) largest = std::max(largest, static_cast<size_t>(p.numel));
  return std::min(largest, kF32Piece) * sizeof(float);
}

HostBytes host_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                     int64_t chunk_tokens, int64_t chunks) {
  const size_t wd = dtype_size(plan.weight_dtype), gd = dtype_size(plan.grad_dtype);
  HostBytes h;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    const bool on_disk = u < plan.state_on_disk.size() && plan.state_on_disk[u];
    // The run reads its weights one unit at a time, straight into the fp32 masters in RAM, else
    // into one buffer that a lean format encodes or the disk tier writes (train/step_executor.cpp).
    if (on_disk || !is_exact(plan.optimizer_state))
      h.loaded_weights = std::max(h.loaded_weights, n * sizeof(float));
    if (plan.units[u] == UnitPlacement::ResidentWithStreamedOptimizer) {
      // fp32 master, m and v registered as pinned (the GPU reads and writes them), committed before
      // they are: none of them waits for the state commit.
      h.pinned += 3 * HostArray::mapped_bytes(n);
      continue;
    }
    const bool on_host = plan.units[u] != UnitPlacement::ResidentWithOptimizer;
    if (on_host && plan.weight_upload == WeightUpload::ConvertOnUpload) {
      // The fp32 masters' mappings registered as pinned (uploaded as they are), m and v pageable;
      // the gradient lands in a buffer of its own or in the ring (counted below).
      h.pinned += HostArray::mapped_bytes(n);
      h.pageable += 2 * HostArray::mapped_bytes(n);
      h.moments += 2 * HostArray::mapped_bytes(n);
      continue;
    }
    // fp32 master, m and v of every unit (for a ResidentWithOptimizer unit: the copy checkpoints
    // read), or the arrays of a lean format, each in its own huge-page mapping -- but for a unit in
    // the disk tier, whose state passes through the tier's buffers (counted below).
    if (!on_disk) {
      const size_t state = state_mapped_bytes(plan.optimizer_state, n);
      h.pageable += state;
      h.moments += state - master_mapped_bytes(plan.optimizer_state, n);
    }
    // One staging buffer per host-updated unit holds the weights to upload, or the gradient from
    // its d2h until the update writes the new weights over it (unit_updater.h).
    if (on_host) h.pinned += n * wd;
  }
  h.pageable += disk_tier_layout(layout, plan).ram_bytes();
  h.pageable += lean_save_scratch_bytes(layout, plan);
  const GradientLanding landing = gradient_landing(layout, plan);
  h.pinned += landing.ring_buffers * landing.ring_elements * gd;
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (landing.dedicated[u]) h.pinned += static_cast<size_t>(layout.units[u].numel) * gd;
  // Each device of a group (Plan::devices) has its own pinned buffers for its share of the step
  // (`chunks` is a device's): offloaded boundaries, token staging, norm partials' readback.
  const size_t devices = static_cast<size_t>(std::max<int64_t>(1, plan.devices));
  const int64_t held = sweep_chunks(plan, chunks);
  const size_t act = round_to_256(static_cast<size_t>(held * chunk_tokens * config.hidden_size) * wd);
  const size_t internals =
      static_cast<size_t>(held) *
      layer_internals_bytes(config, chunk_tokens, plan.weight_dtype, plan.kept_internals);
  for (auto a : plan.activations) {
    if (boundary_on_host(a)) h.pinned += act * devices;
    if (a == ActivationPlacement::OffloadWithInternals) h.pinned += internals * devices;
  }
  // tokens, loss
  h.pinned +=
      (round_to_256(kStepTokenArrays * static_cast<size_t>(chunks * chunk_tokens) * sizeof(int32_t)) + 256) *
      devices;
  // The gradients of the embedding rows the step's tokens touch, gathered on the device; a group's
  // come from every device into one buffer of their own, sized for the whole step.
  if (row_sparse_embedding(layout, plan) && (devices > 1 || !row_gradients_share_an_offloaded_boundary(plan)))
    h.pinned += static_cast<size_t>(max_embedding_rows(config, chunk_tokens, chunks * plan.devices) *
                                    config.hidden_size) *
                gd;
  h.pinned += host_unit_norm_partials(layout, plan) * sizeof(double) * devices;  // their readback
  const GpuOptimizerBytes g = gpu_optimizer_bytes(layout, plan);
  if (g.partials > 0) {
    h.pinned += g.staging_elements * sizeof(float) + 256;                   // state transfers; clip and norm
    if (!plan.optimizer_on_gpu()) h.pinned += g.partials * sizeof(double);  // norm partials for the host
  }
  return h;
}

}  // namespace ferry
