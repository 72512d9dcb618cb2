// A Plan: everything the engine needs to know to run a step, decided before the first step
// (DESIGN.md §3: the planner chooses, the engine executes and never decides by itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/kept_internals.h"
#include "optim/state_format.h"

namespace ferry {

// Where a unit's parameters (and optimizer state) live during training.
enum class UnitPlacement {
  Streamed,        // fp32 state on the host; weights uploaded into a GPU slot when needed
  ResidentParams,  // weights stay on the GPU (uploaded after each update); state on the host
  // Weights, fp32 gradients, fp32 master, m and v stay on the GPU and the GPU AdamW updates them:
  // no PCIe traffic and no CPU work for this unit; the host keeps a copy of its master, m and v
  // only for checkpoints. (Every unit so placed = Plan::optimizer_on_gpu().)
  ResidentWithOptimizer,
  // Weights and gradients stay on the GPU (as ResidentParams) and the GPU AdamW updates them, with
  // the fp32 master, m and v kept in pinned host memory and passing through the GPU once a step in
  // pieces (12 bytes a parameter each way, on the bulk copy streams): the link's share of the update
  // beside the CPU's, where the CPU's alone would keep the next forward waiting. Decoder layers only.
  ResidentWithStreamedOptimizer,
};
// Whether the unit's AdamW runs on the device (its state there or streamed through it): no CPU
// update and no gradient download, its norm partials computed on the device.
inline bool updated_on_device(UnitPlacement p) {
  return p == UnitPlacement::ResidentWithOptimizer || p == UnitPlacement::ResidentWithStreamedOptimizer;
}

// How a streamed or resident unit's new weights reach the GPU after a CPU update.
enum class WeightUpload {
  // The CPU AdamW also writes the bf16 weights into the unit's pinned staging buffer, the one its
  // gradient arrived in (2 bytes/param of host memory for both); the upload moves 2 bytes/param.
  HostShadow,
  // The fp32 masters themselves pinned and uploaded, converted on the GPU; each upload moves 4
  // bytes/param and the CPU AdamW writes no bf16 copy. Gradients need pinned buffers of their own:
  // without clipping a ring of three layer-sized ones (host memory 12 bytes/param plus the ring),
  // with clipping one per unit (14, as HostShadow). memory_model.h's gradient_landing().
  ConvertOnUpload,
};

// Where a layer's activations wait between forward and backward: its boundary activation (its
// input) always, and with KeepWithInternals its forward intermediates too.
enum class ActivationPlacement {
  KeepOnGpu,      // the boundary on the GPU; the backward recomputes the layer's forward from it
  OffloadToHost,  // d2h after the forward, h2d prefetch before the backward; recomputed as above
  // The boundary and the forward's outputs of the GEMMs and the attention (q/k/v, attention output
  // and statistics, x1, gate/up), for each micro-chunk, on the GPU: the backward skips the
  // recompute but for the norms and the activation (memory-bound passes) for that many bytes of
  // device memory.
  KeepWithInternals,
  // The boundary offloaded as OffloadToHost, and the internals KeepWithInternals keeps, of every
  // micro-chunk, too: d2h after the forward from a ring of device staging buffers (one or two, each
  // a layer's internals: boundary_groups.h), h2d back before the backward. The backward skips the
  // recompute as KeepWithInternals does, for host memory and PCIe time instead of device memory.
  OffloadWithInternals,
  // Not kept: the backward recomputes it, with the forward of the layers below it, from the
  // nearest kept boundary below (planner/boundary_groups.h); the forward's copy lives in a GPU
  // buffer shared with the other groups. Never the first boundary.
  Recompute,
};
// Whether the boundary activation stays in device memory from its forward to its backward.
inline bool boundary_on_gpu(ActivationPlacement a) {
  return a == ActivationPlacement::KeepOnGpu || a == ActivationPlacement::KeepWithInternals;
}
// Whether the boundary activation waits in pinned host memory.
inline bool boundary_on_host(ActivationPlacement a) {
  return a == ActivationPlacement::OffloadToHost || a == ActivationPlacement::OffloadWithInternals;
}
// Whether the layer keeps its forward's internals, wherever, so that its backward skips the recompute.
inline bool keeps_internals(ActivationPlacement a) {
  return a == ActivationPlacement::KeepWithInternals || a == ActivationPlacement::OffloadWithInternals;
}

enum class UpdateSchedule {
  // Gradients land on the host during backward; once the step's global norm is known (clipping),
  // units are updated layer 0 first, overlapped with the next step's forward.
  AfterBackward,
  // Without clipping: each unit is updated as soon as its gradient lands, during backward.
  DuringBackward,
};

struct Plan {
  int64_t micro_batch = 1;  // sequences per micro-chunk
  // Tokens per sequence tile: a layer's and the head's token-local passes run over tiles of this
  // many tokens of a micro-chunk (model/decoder_layer.h); 0: untiled, one tile per micro-chunk.
  // Layers keeping their internals (KeepWithInternals, OffloadWithInternals) need an untiled plan.
  int64_t seq_tile = 0;
  // Groups of KV heads a layer's attention runs in, one at a time (model/decoder_layer.h): q, k, v,
  // their gradients and the attention workspace hold 1/head_groups of the heads. 1: all at once.
  // Divides the model's KV heads; layers keeping their internals need 1.
  int64_t head_groups = 1;
  // Offloaded boundaries share one staging buffer on the device where no two adjacent ones are
  // offloaded (planner/boundary_groups.h): a boundary-sized buffer less, for reloads that wait for
  // the use reading the buffer. false: two in turn, whatever the placement.
  bool one_staging_buffer = true;
  // What layers keeping their internals keep besides the products' outputs (carve_kept_internals):
  // WithNorms the two norms' outputs too (2H values a token more each: their backward runs neither
  // norm again), WithActivation the SwiGLU activation as well (F values more: it runs nothing again).
  KeptInternals kept_internals = KeptInternals::Products;
  // The logits chunks whose dlogits one product of the head's weight gradient takes
  // (Ops::linear_cross_entropy): that many chunks' logits held in the ops' working memory for a
  // longer product, which accumulates into the V x H gradient less often. 1: each chunk's own.
  int64_t head_weight_grad_chunks = 1;
  // Parameters a ResidentWithStreamedOptimizer unit's update moves a piece at a time through its
  // ring of device slots (planner/memory_model.h); 0: kStreamedStatePiece.
  int64_t streamed_state_piece = 0;
  int64_t gpu_slots = 2;                         // slots for streamed units (>= 2 for overlap)
  std::vector<UnitPlacement> units;              // one per unit of the model layout
  std::vector<ActivationPlacement> activations;  // one per decoder layer (+1: the head's input)
  UpdateSchedule update = UpdateSchedule::AfterBackward;
  DType weight_dtype = DType::BF16;  // weights on the GPU (F32 on the simulated device)
  // Gradients of the units updated on the host (slots, ResidentParams), on the GPU and across PCIe.
  // ResidentWithOptimizer units always accumulate fp32 gradients.
  DType grad_dtype = DType::BF16;
  WeightUpload weight_upload = WeightUpload::HostShadow;
  // How the host keeps masters, m and v (config `optimizer_state`; fp32 is exact). A lean format
  // is the user's choice, never the planner's: it changes the numbers. With one, every unit is
  // updated on the host (the GPU AdamW keeps fp32 state) and weights go up as a bf16 shadow
  // (ConvertOnUpload uploads fp32 masters).
  OptimizerStateFormat optimizer_state = OptimizerStateFormat::Fp32;
  // The run's seed, from which a lean format's stochastic rounding draws (lean_unit_seed); set by
  // the trainer, not the search.
  uint64_t state_seed = 0;
  // The disk tier (engine/disk_state_tier.h): units whose optimizer state lives in a file under
  // disk_dir instead of host RAM, paged through disk_slots RAM buffers around the CPU updater's
  // order. Empty (or all false): every unit's state in RAM. Only host-updated decoder layers, with
  // HostShadow uploads (converting on upload reads the masters from RAM at every upload).
  std::vector<bool> state_on_disk;
  int64_t disk_slots = 0;
  std::string disk_dir;  // set by the caller that knows the config (train/plan_selection.h)
  // Devices that run the plan together (engine/device_group_engine.h), each with the slots,
  // residency and activations above for its share of a step (micro_batch and the step shape are
  // per device), one host state for all. Several devices update every unit on the host and upload
  // from the bf16 staging (HostShadow); their plan never keeps a unit's optimizer on a device.
  int64_t devices = 1;
  // Sweeps a step runs: the step's micro-chunks split into this many consecutive shares, each run
  // forward and backward through every unit before the next (gradient accumulation), the
  // gradients summed on the GPU across them and the optimizer run after the last. The kept
  // activations then hold one sweep's micro-chunks instead of the step's: a whole step's
  // boundaries and internals need not fit at once, so layers stop recomputing. It needs every unit
  // resident (weights and gradients on the GPU: streamed weights would cross PCIe twice per sweep)
  // and every boundary on the GPU; in the same micro-chunk order, a layer's gradient is the sum of
  // one sweep's (bit for bit). 1: layer-major over the whole step.
  int64_t sweeps = 1;

  // Units placed ResidentWithStreamedOptimizer.
  int64_t streamed_optimizer_units() const;
  // Every unit ResidentWithOptimizer: the whole model and its optimizer on the GPU, the norm and
  // the clip coefficient computed there too; the host only reads the loss.
  bool optimizer_on_gpu() const;
  // Units whose state is on disk (state_on_disk).
  int64_t disk_units() const;
  std::string describe() const;
};

// The micro-chunks of one sweep (Plan::sweeps) of a step of `chunks`: what the activation buffers
// hold. The last sweep of a step with fewer chunks may hold fewer.
inline int64_t sweep_chunks(const Plan& plan, int64_t chunks) {
  const int64_t sweeps = plan.sweeps > 1 ? plan.sweeps : 1;
  return (chunks + sweeps - 1) / sweeps;
}
// Whether some boundary is recomputed in the backward (ActivationPlacement::Recompute), or some
// layer keeps its forward's internals (keeps_internals): a plan does one or the other.
bool recomputes_boundaries(const Plan& plan);
bool keeps_any_internals(const Plan& plan);
// Why `plan` cannot run in sweeps (a sentence), or empty when it can (or has one sweep).
std::string sweeps_refusal(const Plan& plan);

// How the head's weight gradient is formed (Plan::head_weight_grad_chunks), in words: "one product
// per logits chunk", or "over N logits chunks at once".
std::string head_weight_grad_manner(int64_t chunks);

const char* placement_name(UnitPlacement placement);
const char* activation_name(ActivationPlacement placement);
const char* update_name(UpdateSchedule schedule);
const char* weight_upload_name(WeightUpload upload);

}  // namespace ferry
