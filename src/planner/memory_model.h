// Bytes a plan needs on the device and on the host: the one arithmetic shared by the planner (to
// choose) and the engine (to refuse a plan that does not fit, with the numbers, before starting).
// Every buffer the sliding engine and its UnitUpdater allocate is counted here, by the same rule
// (round_to_256 on the device), so a prediction of peak memory is this sum and nothing else.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device/memory_ledger.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

struct DeviceBytes {
  size_t slots = 0;  // weight + gradient slots for streamed units
  size_t resident =
      0;  // weights + gradients of resident units (fp32 gradients + master, m, v with the GPU optimizer)
  size_t activations = 0;  // kept boundary activations (and kept layer internals), offload staging, head
                           // input, activation gradients
  size_t scratch = 0;      // one layer's working memory for a micro-chunk, and the head's
  size_t other = 0;        // token ids, rope tables, loss; the GPU optimizer's norm partials and scalars
  // The CUDA ops' own working memory (cuBLASLt workspace, cross-entropy logits chunk, attention
  // and weight-gradient scratch), allocated by the ops on first use and kept: see
  // cuda_ops_workspace_bytes(). 0 with fp32 weights, which run on the CPU reference ops.
  size_t ops_workspace = 0;
  size_t total() const { return slots + resident + activations + scratch + other + ops_workspace; }
};

struct HostBytes {
  // fp32 masters, m and v of every unit (12 bytes/param; a lean optimizer_state's arrays instead,
  // optim/state_format.h), in huge-page mappings (optim/host_array.h);
  // converting on upload, the host-updated units' masters count as pinned instead. Units in the
  // disk tier count here only through its RAM buffers (planner/disk_tier_layout.h).
  size_t pageable = 0;
  // Page-locked (DMA) memory: each host-updated unit's staging buffer (its weights to upload, or
  // its gradient until the update: 2 bytes/param in bf16) -- or, converting on upload, its
  // registered masters and the gradient buffers of gradient_landing() -- offloaded boundary
  // activations, token staging, and the GPU optimizer's transfers (state staging, norm partials,
  // scalars).
  size_t pinned = 0;
  // What the plan search adds (PlanRequest): the process beside the engine (runtime, data,
  // checkpoint writing), and the device's bytes where its memory is host memory (SimDevice).
  size_t beside = 0;
  size_t device = 0;
  // At the start, the model's weights are read one unit at a time (ModelWeights::deferred):
  // straight into the fp32 masters of an exact state in RAM, and into one fp32 buffer (of the
  // largest such unit: loaded_weights) for a unit that a lean format encodes or the disk tier
  // writes; the moments (m and v, a lean format's codes and scales) of the units in RAM are
  // written only after the last (train/step_executor.cpp). Until then the process holds the total
  // less those moments, plus that buffer.
  size_t loaded_weights = 0;
  size_t moments = 0;
  size_t engine() const { return pageable + pinned; }
  size_t total() const { return pageable + pinned + beside + device; }
  // The most the process holds while the weights become the state (the state commit).
  size_t start() const { return total() - moments + loaded_weights; }
  // What the host budget must hold: the run's steady total, or its start where that is more (most
  // of the state on disk, or a lean format with few pinned buffers).
  size_t peak() const { return std::max(total(), start()); }
};

// The GPU optimizer's (ResidentWithOptimizer units') buffers beside their weights and state.
// Gradient-norm partials: one double per 8Ki-element chunk of each parameter (clip.h), on the
// device, and copied to the host when host-updated units share the norm. State staging: the
// pinned buffer checkpoints and loads move master, m and v through, at most
// kStateStagingElements floats (16 MiB) at a time.
constexpr size_t kStateStagingElements = size_t{4} << 20;
// ResidentWithStreamedOptimizer units' master, m and v pass through a ring of
// kStreamedStateSlots device slots, each holding those three arrays of one piece of at most
// kStreamedStatePiece parameters (3 x 32 MiB; Plan::streamed_state_piece where set): a piece's
// h2d, update and d2h overlap the next pieces' (engine/device_optimizer.h).
inline constexpr size_t kStreamedStateSlots = 3;
inline constexpr size_t kStreamedStatePiece = size_t{8} << 20;
struct GpuOptimizerBytes {
  size_t partials = 0;          // norm partials of all units updated on the device
  size_t staging_elements = 0;  // floats of state staging; 0 when no unit has its optimizer on the GPU
  size_t streamed_piece = 0;    // parameters of a streamed-state slot's piece; 0: no such unit
  // The device ring of the streamed units' state: kStreamedStateSlots x 3 arrays of a piece.
  size_t streamed_ring_bytes() const;
};
GpuOptimizerBytes gpu_optimizer_bytes(const ModelLayout& layout, const Plan& plan);
// What a layer keeps of its forward for one micro-chunk (carve_kept_internals), as the engine
// allocates it for ActivationPlacement::KeepWithInternals; `kept`: Plan::kept_internals.
size_t layer_internals_bytes(const ModelConfig& config, int64_t chunk_tokens, DType weight_dtype,
                             KeptInternals kept);
// Norm partials of one unit: grad_sumsq_chunks of each of its parameters.
size_t grad_norm_partials(const UnitLayout& unit);
// Norm partials of the host-updated units together: the engine computes them on the device before
// each gradient's d2h (one device buffer, one pinned readback).
size_t host_unit_norm_partials(const ModelLayout& layout, const Plan& plan);

size_t round_to_256(size_t bytes);

// WeightUpload::ConvertOnUpload: where the host-updated units' gradients land, the bf16 staging
// buffers of HostShadow being gone (each unit's fp32 masters are pinned and uploaded instead).
//  * AfterBackward: every unit's gradient waits for the global norm, so each lands in a buffer of
//    its own (2 bytes/param: no saving on HostShadow's 14).
//  * DuringBackward: a unit's gradient is consumed by its update as soon as it lands, so the
//    decoder layers' gradients take turns in a ring of kGradientRingBuffers buffers (the d2h into
//    a buffer waits until the update of the gradient before it there has read it); only units
//    larger than a layer (the lm_head, a non-row-sparse embedding) keep one of their own. The host
//    then holds 12 bytes/param plus the ring: 8B parameters, 96 GB instead of 112.
// The row-sparse embedding's token rows land in the row-gradient buffer as with HostShadow.
inline constexpr size_t kGradientRingBuffers = 3;
struct GradientLanding {
  size_t ring_buffers = 0;      // buffers the ring units take in turn
  size_t ring_elements = 0;     // gradient elements each holds (the largest ring unit's)
  std::vector<bool> in_ring;    // per unit: lands in the ring
  std::vector<bool> dedicated;  // per unit: lands in a buffer of its own (numel elements)
};
// Empty (no buffer at all) for WeightUpload::HostShadow.
GradientLanding gradient_landing(const ModelLayout& layout, const Plan& plan);
// The device's fp32 staging through which ConvertOnUpload uploads masters: pieces of at most
// kConversionStagingElements floats (64 MiB) are copied up and written as weights in turn, on the
// h2d stream. 0 for HostShadow.
inline constexpr size_t kConversionStagingElements = size_t{16} << 20;
size_t conversion_staging_elements(const ModelLayout& layout, const Plan& plan);

// Whether the embedding's gradient reaches the host as the step's token rows alone: an untied
// embedding updated on the host. Its gradient is zero on every row no token of the step names, so
// the updater updates those rows ahead, with a zero gradient, while the step computes, and at the
// step's end only the token rows, from their gathered gradients (unit_updater.h).
// A lean optimizer state also needs the embedding's rows to be whole quantization blocks.
bool row_sparse_embedding(const ModelLayout& layout, const Plan& plan);
// The host bytes one unit's optimizer state maps in `format`: each of its arrays
// (state_arrays) is a HostArray of its own, whole 4 KiB pages.
size_t state_mapped_bytes(OptimizerStateFormat format, size_t numel);
// Of those, the master's arrays (the fp32 master, or a lean format's bf16 master and compensation).
size_t master_mapped_bytes(OptimizerStateFormat format, size_t numel);
// The int32 arrays of a step's tokens the device holds: ids, targets, positions, doc_start, the
// step's distinct ids (the embedding rows it touches), and the chunks' attention segment bounds
// (StepBatch::segment_bounds), each one entry per token.
inline constexpr size_t kStepTokenArrays = 6;
// The most rows a step's embedding gradient has: distinct token ids, at most one per token.
int64_t max_embedding_rows(const ModelConfig& config, int64_t chunk_tokens, int64_t chunks);
// Where they land: in the pinned buffer of an offloaded boundary activation when the plan has
// one (it holds one row per token, and is free from that boundary's reload in the backward until
// its offload in the next forward, which follows the embedding's update), else in a buffer of
// their own.
bool row_gradients_share_an_offloaded_boundary(const Plan& plan);

// The CUDA ops' working memory for micro-chunks of `chunk_tokens` tokens (ops/cuda/cuda_ops.h):
// the 32 MiB cuBLASLt workspace; the fused linear-cross-entropy's bf16 logits chunk (at most
// 512 MiB) and per-token losses; attention's workspace (cuDNN's: two fp32 dq, fp32 delta and
// statistics, 32 MiB more for its plan); the embedding backward's sort (~32 bytes per token);
// column-reduction partials (1024 rows); and, with bf16 gradients, the bf16 sum of the largest
// layer weight gradient. Llama-3.1-8B at 8192 tokens per chunk: 32 MiB (cuBLASLt) + 501 MiB
// (2048 tokens x 128256 x 2 bytes of logits) + 290 MiB (attention: 8192 x 32 heads x (2 + 256) x 4
// bytes + 32 MiB) + 16 MiB (partials: 1024 x 4096 x 4) + 112 MiB (14336 x 4096 x 2 bytes) + <1 MiB
// ≈ 951 MiB. Attention in `head_groups` groups of KV heads (decoder_layer.h) runs on 1/head_groups
// of the query heads at a time, and its workspace is sized for them. With the head's weight
// gradient taken over `head_weight_grad_chunks` logits chunks (Plan::head_weight_grad_chunks), that
// many chunks' logits.
size_t cuda_ops_workspace_bytes(const ModelConfig& config, int64_t chunk_tokens, DType grad_dtype,
                                int64_t head_groups = 1, int64_t head_weight_grad_chunks = 1);

// The activation-gradient buffer: one sweep's micro-chunks of (tokens, hidden) (Plan::sweeps), and
// at least the step's embedding rows where their gradients are gathered in it (the row-sparse
// embedding, unit_updater.h: at most one row per token of the step, which one sweep may not hold).
size_t activation_gradient_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                                 int64_t chunk_tokens, int64_t chunks);

// The device bytes of `plan` for micro-chunks of `chunk_tokens` tokens, `chunks` per step.
DeviceBytes device_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                         int64_t chunk_tokens, int64_t chunks);
// A lean format's masters are written (checkpoints, the final model) decoded a piece at a time
// (io/safetensors_writer.h kF32Piece elements, or the largest tensor if smaller) into one fp32
// buffer (train/step_executor.cpp, streamed_state): its bytes, 0 for fp32 state. Counted in
// host_bytes' pageable.
size_t lean_save_scratch_bytes(const ModelLayout& layout, const Plan& plan);
HostBytes host_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                     int64_t chunk_tokens, int64_t chunks);

}  // namespace ferry
