// The sliding engine (DESIGN.md §1–2): runs training steps on a Device whose memory holds only a
// few units at a time. Layer-major order; weights uploaded into GPU slots ahead of use (h2d
// stream); boundary activations kept on the GPU or offloaded to pinned host memory and prefetched
// back for the backward; each layer recomputed from its input in the backward; gradients copied
// to the host (d2h stream) where the UnitUpdater's CPU AdamW turns them into the next weights,
// overlapped with the device's work. Streams are joined by events; the host waits only to read
// the loss and for an update it is about to upload.
//
// On the simulated device with fp32 weights and gradients it computes exactly what ModelStep +
// UnitOptimizer compute (bit for bit), whatever the plan: that is how every schedule is tested.
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"
#include "engine/model_step.h"
#include "planner/slot_schedule.h"
#include "engine/step_batch.h"
#include "engine/unit_updater.h"
#include "io/model_config.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/unit_layout.h"
#include "ops/ops.h"
#include "optim/gpu_adamw.h"
#include "planner/plan.h"

namespace ferry {

struct SlidingStepResult {
  double loss = 0.0;  // mean over counted tokens
  int64_t counted_tokens = 0;
  double grad_norm = 0.0;
};

class SlidingEngine {
 public:
  // `max_chunks` micro-chunks of `chunk_tokens` tokens per step at most. Allocates every device
  // and pinned buffer now, once; throws ferry::Error when the device budget is too small.
  SlidingEngine(const ModelConfig& config, const ModelLayout& layout, Device& device, Ops& ops, const Plan& plan,
                int64_t chunk_tokens, int64_t max_chunks, bool decay_all);
  ~SlidingEngine();

  // Host state of the optimizer (fp32 masters, m, v per unit). After changing masters, call
  // weights_changed(step) so the device copies follow.
  UnitUpdater& host() { return *updater_; }
  void weights_changed(int64_t step);

  // Runs optimizer step `step` (1-based, consecutive). Returns once the step's loss is known; the
  // CPU update of this step may still be running (overlapping the next step's forward).
  SlidingStepResult step(int64_t step, const StepBatch& batch, const AdamWHyper& hyper, double max_grad_norm);

  // Waits until the masters hold every update issued so far (before a checkpoint or the end).
  void finish_updates();

 private:
  void* unit_params_ptr(size_t unit, int64_t slot) const;
  void* unit_grads_ptr(size_t unit, int64_t slot) const;
  Tensor activation(int64_t boundary, int64_t chunk) const;
  // The gradient flowing back into chunk `chunk`'s current boundary, (T,H).
  Tensor activation_grad(int64_t chunk) const;
  void issue_loads_up_to(size_t limit);
  void issue_load(size_t use_index);
  void compute_use(size_t use_index, const StepBatch& batch);
  // Copies the unit's gradient to the host and hands it to the updater; returns the event after
  // which the slot's gradient buffer may be reused.
  EventId send_gradients(size_t unit, int64_t slot);
  // Plan::optimizer_on_gpu: state transfers between the host's UnitUpdater and device memory.
  void upload_optimizer_state();
  void download_optimizer_state();
  void update_on_gpu(int64_t step, const AdamWHyper& hyper, double max_grad_norm);

  ModelConfig config_;
  ModelLayout layout_;
  Device& device_;
  Ops& ops_;
  Plan plan_;
  int64_t chunk_tokens_;
  int64_t max_chunks_;
  std::unique_ptr<UnitUpdater> updater_;
  std::vector<SlotUse> uses_;
  std::vector<bool> resident_;

  // device memory
  size_t slot_param_bytes_ = 0, slot_grad_bytes_ = 0;
  std::vector<DeviceBuffer> slot_params_, slot_grads_;
  std::vector<DeviceBuffer> resident_params_, resident_grads_;  // indexed by unit (empty if streamed)
  std::vector<DeviceBuffer> kept_activations_;                   // per boundary that stays on the GPU
  DeviceBuffer staging_activations_[2];                          // ring for offloaded boundaries
  std::vector<PinnedBuffer> host_activations_;                   // per offloaded boundary
  DeviceBuffer head_input_, chunk_grads_, scratch_, tokens_, inv_freq_, loss_;
  PinnedBuffer tokens_host_, loss_host_;
  LayerScratch layer_scratch_;
  HeadScratch head_scratch_;

  // Plan::optimizer_on_gpu
  std::vector<DeviceBuffer> device_master_, device_m_, device_v_;
  std::unique_ptr<GpuAdamW> gpu_adamw_;
  DeviceBuffer norm_sumsq_, clip_;  // double sum of squares, float clip coefficient
  PinnedBuffer state_staging_, norm_host_;
  bool state_on_host_current_ = true;

  // per-step bookkeeping
  int64_t step_ = 0;
  std::vector<EventId> loaded_;      // per use: its slot holds the unit (h2d)
  std::vector<EventId> released_;    // per use: the slot may be overwritten
  size_t next_load_ = 0;
  EventId staging_free_[2] = {-1, -1};   // an offloaded boundary left the staging buffer
  std::vector<EventId> activation_back_;  // per boundary: reloaded for the backward
  EventId tokens_free_ = -1;
  std::vector<EventId> last_read_;  // per unit: compute that last read its resident weights
};

}  // namespace ferry
