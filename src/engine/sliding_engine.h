// The sliding engine (DESIGN.md §1–2): runs training steps on a Device whose memory holds only a
// few units at a time. Layer-major order; weights uploaded into GPU slots ahead of use (h2d
// stream); boundary activations kept on the GPU or offloaded to pinned host memory and prefetched
// back for the backward; each layer recomputed from its input in the backward; gradients copied
// to the host (d2h stream) where the UnitUpdater's CPU AdamW turns them into the next weights,
// overlapped with the device's work; units placed ResidentWithOptimizer are updated on the device
// instead (DeviceOptimizer). Streams are joined by events; the host waits only to read the loss
// and the gradient norm, and for an update it is about to upload.
//
// On the simulated device with fp32 weights and gradients it computes exactly what ModelStep +
// UnitOptimizer compute (bit for bit), whatever the plan: that is how every schedule is tested.
//
// What each plan option costs and saves, per parameter of a unit (bf16 weights and gradients on
// the GPU; N parameters in all; the arithmetic is planner/memory_model.cpp's):
//
//   placement              GPU memory            host memory                  PCIe per step        CPU per
//   step Streamed               a share of the slots  12 B fp32 master, m, v       h2d 2 B × 2 uploads AdamW:
//   ~28 B of
//                          (slots × largest      (huge pages) + 2 B pinned    (forward, backward)  DRAM
//                          traffic streamed unit × 4 B)  staging                      + d2h 2 B gradient
//   ResidentParams         4 B (weights, grads)  the same 14 B                h2d 2 B once + d2h 2 B  the
//   same ResidentWithOptimizer  18 B (weights 2,      12 B (a copy of master, m,   none (8 B of norm    none
//   (GPU AdamW,
//                          fp32 grads 4,         v for checkpoints), no       partials per 8Ki     ~30 B of
//                          HBM master, m, v 12)      pinned staging               params) traffic)
//
//  * The pinned staging buffer of a host-updated unit carries its weights up and its gradient down
//    (unit_updater.h), so the host holds 14 bytes/param, not 16: 8B parameters (Llama-3.1-8B) need
//    (12 + 2) × 8.03e9 = 112.4 GB, plus the offloaded boundary activations (chunks × tokens ×
//    hidden × 2 bytes per offloaded layer), token staging, and 256 B of scalars.
//  * The untied embedding, updated on the host, is row-sparse (unit_updater.h): its rows without a
//    gradient are updated while the step computes, and at the step's end only its token rows'
//    gradients go down (gathered on the device; at most one row per token, so they fit in an
//    offloaded boundary's pinned buffer, which is free then; a plan that offloads none gets a
//    buffer of their own, tokens × hidden × 2 bytes) and are updated. Its backward claims a slot
//    but uploads no weights (the scatter reads none).
//  * ActivationPlacement: KeepOnGpu holds a layer's boundary activation on the GPU; OffloadToHost
//    moves it to pinned host memory (the same bytes) and back (2 × its bytes over PCIe per step),
//    with a 2-buffer staging ring on the GPU. KeepWithInternals also keeps the layer's forward
//    intermediates that GEMMs and the attention wrote, per micro-chunk (layer_internals_bytes
//    each): its backward runs again only the norms and the activation (decoder_layer.h), only
//    the activation where the plan keeps the norms' outputs too, or nothing where it keeps the
//    activation as well (Plan::kept_internals), which gives the same bits. Recompute keeps the boundary
//    nowhere: the backward runs the forward of the layers of its group again from the group's kept boundary
//    (planner/boundary_groups.h), which gives the same bits too.
//  * UpdateSchedule: AfterBackward (clipping needs the global norm) updates the host units after
//    the backward, embedding first, overlapped with the next step's forward, and the device units
//    at the step's end; DuringBackward (no clipping) updates each unit as its gradient lands.
//  * All units ResidentWithOptimizer (Plan::optimizer_on_gpu()): the norm and the clip coefficient
//    are computed on the GPU too; nothing crosses PCIe but the tokens and the loss.
//  * WeightUpload::ConvertOnUpload: no bf16 staging; the fp32 masters are registered as pinned
//    memory and uploaded in 64 MiB pieces through an fp32 staging buffer on the device, where the
//    h2d stream writes each piece as weights (DeviceAdamW::write_weights) before the next arrives.
//    Uploads move 4 B/param instead of 2, and the CPU AdamW writes no weight copy. Gradients land
//    in a ring of three layer-sized buffers without clipping (12 B/param on the host plus the ring:
//    8B parameters in 96 GB + ~1.3 GB instead of 112.4 GB), or in a buffer per unit with clipping
//    (14 B/param, as HostShadow: there the planner never chooses it).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "device/device.h"
#include "engine/device_optimizer.h"
#include "engine/device_share.h"
#include "engine/engine_buffers.h"
#include "engine/model_step.h"
#include "engine/step_batch.h"
#include "engine/unit_updater.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "ops/ops.h"
#include "planner/boundary_groups.h"
#include "planner/plan.h"
#include "planner/slot_schedule.h"

namespace ferry {

struct SlidingStepResult {
  double loss = 0.0;  // mean over counted tokens
  int64_t counted_tokens = 0;
  double grad_norm = 0.0;
};

class SlidingEngine {
 public:
  // `max_chunks` micro-chunks of `chunk_tokens` tokens per step at most. Allocates every device
  // and pinned buffer now, once; throws ferry::Error when the device budget is too small. With a
  // `share`, this engine is one device of a group (engine/device_share.h): max_chunks is its
  // share of a step, and the host state is the group's.
  SlidingEngine(const ModelConfig& config, const ModelLayout& layout, Device& device, Ops& ops,
                const Plan& plan, int64_t chunk_tokens, int64_t max_chunks, bool decay_all,
                const DeviceShare* share = nullptr);
  ~SlidingEngine();

  // Host state of the optimizer (fp32 masters, m, v per unit; for units updated on the device,
  // current after finish_updates()). After changing masters, m or v, call weights_changed(step)
  // so the device copies follow.
  UnitUpdater& host() { return *updater_; }
  void weights_changed(int64_t step);

  // Runs optimizer step `step` (1-based, consecutive). Returns once the step's loss and gradient
  // norm are known; the CPU update of this step may still be running (overlapping the next step's
  // forward), and the device units' update is issued to the compute stream.
  SlidingStepResult step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper, double max_grad_norm);
  // In a group: this device's share of step `step` (its micro-chunks), with what the whole step
  // says. Every rank of the group calls it, each from its own thread; the result is the group's.
  SlidingStepResult step(int64_t step, const StepBatch& share, const GroupStep& group,
                         const AdamWHyper& hyper, double max_grad_norm);

  // Waits until the host's masters, m and v hold every update issued so far (before a checkpoint
  // or the end); copies the device units' state back.
  void finish_updates();

  // Forward only, through the same slots, buffers and ops as a step: the summed loss of `batch`
  // over the weights of every update issued so far (evaluation between steps). Touches neither
  // the optimizer state nor the step count; on the simulated device it gives ModelStep::evaluate's
  // bits.
  StepLoss evaluate(const StepBatch& batch);

 private:
  void* unit_params_ptr(size_t unit, int64_t slot) const;
  void* unit_grads_ptr(size_t unit, int64_t slot) const;
  // Boundary `boundary` of micro-chunk `step_chunk` (of the step's, in the sweep being run).
  Tensor activation(int64_t boundary, int64_t step_chunk) const;
  // The gradient flowing back into micro-chunk `step_chunk`'s current boundary, (T,H).
  Tensor activation_grad(int64_t step_chunk) const;
  // What both step() overloads run, once the step's GroupStep is known: the checks, then
  // begin_step, every use and end_step.
  SlidingStepResult run_step(int64_t step, const StepBatch& batch, GroupStep group, const AdamWHyper& hyper,
                             double max_grad_norm);
  // One step, in the order step() runs it: the step's tokens up and its bookkeeping reset; each
  // use of the slot schedule (a unit's forward, the head, a unit's backward); the loss and norm.
  void begin_step(const StepBatch& batch, GroupStep group, const AdamWHyper& hyper, double max_grad_norm);
  // The batch's token arrays up to the device (and `rows`, its distinct ids, beside them); the loss
  // zeroed; the step's chunk count and counted targets noted.
  void upload_tokens(const StepBatch& batch, const std::vector<int32_t>& rows);
  // The use that runs the head: the last of the forward (step_unit_sequence).
  size_t head_use() const { return static_cast<size_t>(config_.num_layers) + 1; }
  // The update whose weights the uses read: the previous step's in a step, the last one issued in
  // an evaluation.
  int64_t weights_step() const { return evaluating_ ? step_ : step_ - 1; }
  void run_use(size_t use_index);
  // Uses 0 .. uses - 1 of the schedule for each sweep of the step's micro-chunks in turn
  // (Plan::sweeps): all of them for a step, the forward's and the head's for an evaluation.
  void run_sweeps(size_t uses);
  SlidingStepResult end_step(double max_grad_norm);
  // The compute of one use, all micro-chunks of the step.
  void embedding_forward(void* params);
  void decoder_forward(size_t unit, void* params);
  void head_step(void* params, void* grads);  // forward, loss and backward of the head
  void decoder_backward(size_t unit, void* params, void* grads, EventId before);
  // The layer's forward again in the backward, from its input boundary (reloaded if offloaded),
  // writing its output boundary, a recomputed one (planner/boundary_groups.h).
  void recompute_boundary(size_t unit, void* params, EventId before);
  void embedding_backward(void* grads);
  // After a use's compute: its gradient sent (or handed to the device optimizer), the event after
  // which its slot may be reused recorded.
  void release_use(size_t use_index, bool sends);
  // Micro-chunk c of the step's tokens (on the device).
  TokenChunk chunk(int64_t c) const;
  // A resident unit's weights uploaded once per step, after its last update.
  void ensure_resident(size_t unit);
  // Offloaded boundaries pass through a ring of two staging buffers on the device, taken in turn
  // (BoundaryGroups::staging).
  bool boundary_offloaded(int64_t boundary) const;
  size_t staging_of(int64_t boundary) const;
  // Whether use i reads its input boundary from the one staging buffer of a plan that has one, so
  // the next boundary's reload must wait for it (planner/boundary_groups.h).
  bool reads_the_one_staging_buffer(size_t i) const;
  // Before a use reads boundary `boundary`: if offloaded, its reload issued (unless prefetched) and
  // waited for on the compute stream.
  void await_boundary(int64_t boundary, EventId before);
  size_t boundary_bytes() const;  // one boundary activation, every micro-chunk of the step
  void before_boundary_write(int64_t boundary);
  void offload_boundary(int64_t boundary);
  void reload_boundary(int64_t boundary, EventId staging_readers_done);
  void issue_loads_up_to(size_t limit);
  void issue_load(size_t use_index);
  // Whether the plan keeps the layer's forward intermediates, on the GPU or on the host.
  bool keeps_internals(int64_t layer) const;
  // Internals on the host (ActivationPlacement::OffloadWithInternals, boundary_groups.h): the
  // forward writes them into their staging buffer once its previous d2h is done and sends them
  // down; the backward's reloads come back in backward order, each once the layer that last read
  // its staging buffer is done, issued behind the weights (prefetch_internals).
  bool internals_on_host(int64_t layer) const;
  size_t internals_staging_of(int64_t layer) const;
  size_t internals_step_bytes() const;  // one layer's internals, every micro-chunk of the step
  void offload_internals(int64_t layer);
  void reload_internals(size_t k, EventId readers_done);  // k: index in reloads_.layers
  void prefetch_internals(size_t use_index, EventId before);
  void await_internals(int64_t layer, EventId before);
  // The scratch of (layer, micro-chunk)'s forward and backward: the shared one, with the layer's
  // kept intermediates in place of its own fields where the layer keeps them.
  LayerScratch layer_scratch(int64_t layer, int64_t step_chunk) const;
  DType unit_grad_dtype(size_t unit) const;  // UnitRoles::grad_dtype
  // Copies the unit's gradient to the host and hands it to the updater; returns the event after
  // which the slot's gradient buffer may be reused.
  EventId send_gradients(size_t unit, int64_t slot);
  // Issues the upload of unit u's weights into device_dst (h2d stream) once the CPU holds them
  // updated for the step the uses read (weights_step()); the row-sparse embedding's range by range
  // as its token pass gets through them (UnitUpdater::wait_rows_updated).
  void upload_when_updated(size_t u, void* device_dst);
  // Issues the upload of unit u's current weights into device_dst (h2d stream): its staging
  // buffer, or its masters converted on the device (WeightUpload::ConvertOnUpload); elements
  // [begin, end) of it alone.
  void upload_weights(size_t u, void* device_dst);
  void upload_weights(size_t u, void* device_dst, size_t begin, size_t end);
  // In a group (sliding_engine_group.cpp): whether this engine holds the group's host state and
  // talks to its updater (alone: always); the device share's uploads and gradients.
  bool owns_host() const { return !share_ || share_->rank == 0; }
  void check_group_plan() const;
  void upload_weight_shard(size_t u, void* device_dst);
  EventId send_gradient_shard(size_t unit, int64_t slot);

  ModelConfig config_;
  ModelLayout layout_;
  Device& device_;
  Ops& ops_;
  Plan plan_;
  BoundaryGroups boundaries_;  // where each boundary waits for the backward
  int64_t chunk_tokens_;
  int64_t max_chunks_;
  UnitRoles roles_;
  EngineBuffers buffers_;
  std::optional<DeviceShare> share_;  // in a group of devices; empty alone
  DeviceBuffer landing_fence_;        // in a group: the one float the d2h stream's fence reduces
  // Destroyed before the buffers: its worker writes into pinned ones until it is joined. A group's
  // rank 0 owns the group's; the other ranks use it.
  std::unique_ptr<UnitUpdater> own_updater_;
  UnitUpdater* updater_ = nullptr;
  std::vector<SlotUse> uses_;
  std::vector<UsePass> passes_;                 // per use: what it computes (step_sequence)
  InternalsReloads reloads_;                    // layers with internals on the host, in the backward's order
  std::unique_ptr<DeviceAdamW> weight_writer_;  // ConvertOnUpload: writes fp32 pieces as weights (h2d stream)
  // The units updated on the device, if any (after the buffers it refers to: destroyed first).
  std::unique_ptr<DeviceOptimizer> device_optimizer_;
  // Gradient-norm partials of the host-updated units (clip.h's order), computed on the device from
  // each gradient just before it leaves and copied down beside it: the CPU updater then spends its
  // memory bandwidth on AdamW alone instead of also reading every gradient to sum its squares.
  std::unique_ptr<DeviceAdamW> norm_partials_;  // only its grad_sumsq_partials is used

  // The events of one step, in one place so that nothing of a step leaks into the next.
  struct StepEvents {
    std::vector<EventId> loaded;           // per use: its slot holds the unit (h2d)
    std::vector<EventId> released;         // per use: the slot may be overwritten
    size_t next_load = 0;                  // the next use whose load is to be issued
    EventId staging_free[2] = {-1, -1};    // an offloaded boundary left the staging buffer
    std::vector<EventId> activation_back;  // per boundary: reloaded for the backward
    std::vector<EventId> offload_done;     // per boundary: its offload left the staging buffer
    std::vector<bool> resident_uploaded;   // per unit: uploaded this step
    // Internals on the host: per layer their d2h and their reload; per staging buffer its last d2h.
    std::vector<EventId> internals_offload_done, internals_back;
    EventId internals_staging_free[2] = {-1, -1};
    size_t next_internals_reload = 0;  // into reloads_.layers
    void reset(size_t uses, size_t boundaries, size_t units) {
      loaded.assign(uses, -1);
      released.assign(uses, -1);
      next_load = 0;
      staging_free[0] = staging_free[1] = -1;  // every offloaded boundary was reloaded last step
      activation_back.assign(boundaries, -1);
      offload_done.assign(boundaries, -1);
      resident_uploaded.assign(units, false);
      internals_offload_done.assign(boundaries, -1);
      internals_back.assign(boundaries, -1);
      internals_staging_free[0] = internals_staging_free[1] = -1;  // the last step's backward read them
      next_internals_reload = 0;
    }
  };
  StepEvents events_;
  // What the step's batch says, set by begin_step.
  int64_t step_chunks_ = 0;  // micro-chunks in this step
  // The sweep being run (Plan::sweeps): its micro-chunks [sweep_begin_, sweep_end_) of the step's,
  // which the activation buffers hold from their start; whether it is the step's last (the one
  // after whose backward gradients are complete and go to the optimizer).
  int64_t sweep_begin_ = 0, sweep_end_ = 0;
  bool last_sweep_ = true;
  // What attention may assume of each micro-chunk's tokens: TokenChunk's row_tokens, segments and
  // longest_segment (the tokens and the segments' bounds are on the device).
  struct ChunkLayout {
    int64_t row_tokens = 0, segments = 0, longest_segment = 0;
  };
  std::vector<ChunkLayout> step_chunk_layouts_;
  AdamWHyper step_hyper_;
  int64_t counted_tokens_ = 0;             // targets the step's loss counts
  int64_t step_rows_ = 0;                  // the step's distinct token ids (embedding rows touched)
  int64_t step_row_offset_ = 0;            // in a group: where this device's share of them begins
  const int32_t* step_row_ids_ = nullptr;  // on the device, sorted

  // Across steps.
  int64_t step_ = 0;
  bool evaluating_ = false;         // inside evaluate(): forward uses only, no gradients, no updater events
  EventId tokens_free_ = -1;        // the previous step's tokens left their staging
  std::vector<EventId> last_read_;  // per unit: compute that last read its resident weights
};

}  // namespace ferry
