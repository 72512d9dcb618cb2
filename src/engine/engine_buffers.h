// Every device and pinned buffer of the sliding engine, allocated once when the engine is made
// (DESIGN.md §2: nothing is allocated per step), at the sizes planner/memory_model.cpp counts for
// the plan: that function and this constructor are the two halves of "the plan's memory is the
// memory used". The engine orchestrates over these buffers; it allocates nothing of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/device.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

// What the plan says of each unit, looked up by every part of the engine.
struct UnitRoles {
  std::vector<bool> resident;        // per unit: not Streamed
  std::vector<bool> device_updated;  // per unit: updated_on_device (its state there or streamed)
  UnitRoles(const ModelLayout& layout, const Plan& plan);
  // ResidentWithOptimizer units accumulate fp32 gradients; the others (streamed-optimizer units
  // too) the plan's grad dtype.
  DType grad_dtype(size_t unit, const Plan& plan) const;
  bool any_device_updated() const;
};

struct EngineBuffers {
  // Refuses with the numbers (ferry::Error) a plan whose device memory exceeds what the device has
  // free, before allocating anything.
  EngineBuffers(Device& device, const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                const UnitRoles& roles, int64_t chunk_tokens, int64_t max_chunks);

  // GPU slots for streamed units: weights and gradients, each sized for the largest streamed unit.
  size_t slot_param_bytes = 0, slot_grad_bytes = 0;
  std::vector<DeviceBuffer> slot_params, slot_grads;
  std::vector<DeviceBuffer> resident_params, resident_grads;  // indexed by unit (empty if streamed)

  // Boundary activations (every micro-chunk of a sweep each: Plan::sweeps, sweep_chunks).
  std::vector<DeviceBuffer> kept_activations;  // per boundary that stays on the GPU
  DeviceBuffer staging_activations[2];  // ring for offloaded boundaries (one or two: boundary_groups.h)
  std::vector<PinnedBuffer> host_activations;  // per offloaded boundary
  // Recomputed boundaries, each group's in turn (BoundaryGroups::recompute_buffer).
  std::vector<DeviceBuffer> recompute_activations;
  DeviceBuffer head_input;
  // The activation gradients of a sweep's micro-chunks; also where the row-sparse embedding's
  // token rows are gathered (activation_gradient_bytes).
  DeviceBuffer chunk_grads;

  // KeepWithInternals: per such layer one buffer, carved per micro-chunk.
  std::vector<DeviceBuffer> internals_buffers;
  std::vector<std::vector<LayerScratch>> kept_internals;
  // OffloadWithInternals: per such layer a pinned buffer of every micro-chunk's internals, and
  // their ring of one or two staging buffers on the device (boundary_groups.h), carved per
  // micro-chunk as kept_internals are; micro-chunk c's internals start at c × internals_bytes.
  size_t internals_bytes = 0;  // one micro-chunk's (layer_internals_bytes)
  std::vector<PinnedBuffer> host_internals;
  DeviceBuffer internals_staging[2];
  std::vector<LayerScratch> staged_internals[2];
  // Working memory of one micro-chunk's layer and head, shared by every layer.
  DeviceBuffer scratch;
  LayerScratch layer_scratch;
  HeadScratch head_scratch;

  // The step's token arrays (kStepTokenArrays of max_chunks × chunk_tokens) and their staging,
  // the loss and its readback, and RoPE's frequencies (uploaded here, once).
  DeviceBuffer tokens, loss, inv_freq;
  PinnedBuffer tokens_host, loss_host;

  // ConvertOnUpload: fp32 pieces of masters on their way to becoming weights.
  DeviceBuffer conversion_staging;

  // Gradient-norm partials of the host-updated units (clip.h's order) and their readback; each
  // unit's slice starts at host_partial_offset[unit]. Empty when every unit is updated on the device.
  DeviceBuffer host_unit_partials;
  PinnedBuffer host_unit_partials_host;
  std::vector<size_t> host_partial_offset;
  size_t host_partial_count = 0;

  // Where the row-sparse embedding's token-row gradients land at the step's end: an offloaded
  // boundary's pinned buffer, free by then (memory_model.h); null when no boundary is offloaded.
  void* shared_row_gradients() const;
};

}  // namespace ferry
