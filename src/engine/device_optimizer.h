// The sliding engine's units whose optimizer runs on the device (UnitPlacement::ResidentWithOptimizer):
// their fp32 master, m and v in device memory beside the weights and fp32 gradients the engine
// keeps resident for them, updated by a DeviceAdamW on the compute stream (GPU kernels on CUDA,
// the reference AdamW as stream-ordered host tasks on the simulated device).
//
// The global gradient norm covers every unit, in unit order, exactly as the plain trainer sums it
// (clip.h: one double per 8Ki-element chunk of each parameter, added in order). After a unit's
// backward its partials are computed on the device, then:
//  * every unit on the device (Plan::optimizer_on_gpu()): at the end of the backward the partials
//    are added on the device in unit order, the clip coefficient is computed there, and every unit
//    is updated; the host never waits (it reads the norm with the loss);
//  * some units on the host: the partials are copied to the host and join the host units' partials
//    in the UnitUpdater, which computes the norm the step returns. With the after-backward
//    schedule (clipping) the device does not wait for it: the host units' partials are on the
//    device too (the engine computes them there before their gradients go down), so at the end of
//    the backward update_all sums every unit's partials there in the same order and updates the
//    device units, while the last gradients are still going down. Without clipping each unit is
//    updated right after its backward, unscaled.
// Either way the device units' update reads a clip coefficient bit-equal to the host units' (the
// same doubles added in the same order; the clip kernel is clip.cpp's arithmetic), so a step is
// the plain trainer's step whatever the split.
//
// The host's copies of master, m and v (UnitUpdater) are what checkpoints read and loads write:
// upload_state() after a load, download_state() before a checkpoint.
//
// Units placed ResidentWithStreamedOptimizer keep no state here: their master, m and v stay in the
// UnitUpdater's pinned arrays, and each update streams them through a ring of kStreamedStateSlots
// device slots in pieces of kStreamedStatePiece parameters (planner/memory_model.h), on the bulk
// copy streams: a piece goes up on the bulk h2d stream once its slot's previous piece has gone
// down, the GPU AdamW updates it there (writing the piece's new weights into the resident ones),
// and it goes down on the bulk d2h stream. The main copy streams stay free for the host units'
// uploads, and the copy engine of each direction alternates between them. Units are streamed in
// unit order, after the clip coefficient (or, without clipping, after their own backward); the
// compute stream waits for a unit's last piece before the next forward reads its weights
// (streamed_update_done). Their gradients stay in the plan's gradient dtype, as a host unit's.
#pragma once

#include <memory>
#include <vector>

#include "device/device.h"
#include "engine/unit_updater.h"
#include "model/unit_layout.h"
#include "ops/ops.h"
#include "optim/device_adamw.h"
#include "planner/plan.h"

namespace ferry {

// Issues the squared-norm partials of one unit's gradient (`grads`, laid out as `unit`, in
// `grad_dtype`) on the device, per parameter as clip.h cuts them, into `partials`; returns how
// many (grad_norm_partials of the unit). For device-updated units here and for the host-updated
// ones before their gradient leaves (SlidingEngine::send_gradients).
size_t issue_unit_norm_partials(DeviceAdamW& kernels, const UnitLayout& unit, const void* grads,
                                DType grad_dtype, double* partials);

// Where the host updates some units: their norm partials on the device, as the engine computed
// them before each unit's gradient went down (EngineBuffers::host_unit_partials), unit u's at
// (*offset)[u].
struct HostUnitPartials {
  const double* data = nullptr;
  const std::vector<size_t>* offset = nullptr;
};

class DeviceOptimizer {
 public:
  // `weights` and `grads`: the engine's resident buffers, indexed by unit; those of the
  // ResidentWithOptimizer units (fp32 gradients) are used. Allocates the state now.
  DeviceOptimizer(Device& device, Ops& ops, const ModelLayout& layout, const Plan& plan, UnitUpdater& host,
                  const std::vector<DeviceBuffer>& weights, const std::vector<DeviceBuffer>& grads);
  DeviceOptimizer(const DeviceOptimizer&) = delete;
  DeviceOptimizer& operator=(const DeviceOptimizer&) = delete;

  // The host's master, m and v of every device unit to the device, and its weights converted from
  // the masters. Blocks; the device must be idle.
  void upload_state();
  // The device's master, m and v back to the host's copies, if an update changed them. Blocks.
  void download_state();

  // Unit u's gradient of step `step` is complete on the compute stream (its backward is issued).
  void gradient_done(size_t u, int64_t step, const AdamWHyper& hyper);
  // After the step's last backward, on the device: the global norm from every unit's partials in
  // unit order (`host_units` for the units the host updates), the clip coefficient, and every
  // device unit's update; with every unit on the device, the norm's readback to the host too (d2h
  // stream). With some units on the host only for the after-backward schedule.
  void update_all(int64_t step, const AdamWHyper& hyper, double max_grad_norm,
                  HostUnitPartials host_units = {});
  // The norm update_all computed with every unit on the device; valid once the d2h stream has
  // passed the readback.
  double read_norm() const;
  // The event after which the last update issued for streamed-state unit u has written its weights
  // (bulk h2d stream); -1 when none was issued, or u is no such unit.
  EventId streamed_update_done(size_t u) const { return streamed_done_[u]; }

 private:
  void update(size_t u, int64_t step, const AdamWHyper& hyper, const float* grad_scale);
  // A streamed-state unit's update, piece by piece through the ring (see the top), after what the
  // bulk h2d stream was told to wait for.
  void stream_update(size_t u, int64_t step, const AdamWHyper& hyper, const float* grad_scale);
  // Streamed-state unit u's weights from its host masters, through the ring. Blocks.
  void upload_streamed_weights(size_t u);
  DType grad_dtype(size_t u) const;
  // Moves n floats between a host array and device memory through the pinned staging buffer.
  void copy_in(void* device_dst, const float* host_src, size_t n);
  void copy_out(float* host_dst, const void* device_src, size_t n);

  Device& device_;
  Ops& ops_;
  const ModelLayout& layout_;
  const Plan& plan_;
  UnitUpdater& host_;
  const std::vector<DeviceBuffer>& weights_;
  const std::vector<DeviceBuffer>& grads_;
  std::unique_ptr<DeviceAdamW> adamw_;
  std::vector<size_t> units_;                           // the device units, in unit order
  std::vector<DeviceBuffer> master_, m_, v_;            // indexed by unit (empty for host units)
  std::vector<size_t> partial_offset_, partial_count_;  // per unit: its slice of the partials
  DeviceBuffer partials_;                               // (all partials) doubles
  DeviceBuffer scalars_;        // [0, 8): sum of squares (double); [8, 12): clip (float)
  PinnedBuffer partials_host_;  // the partials' copy for the UnitUpdater
  PinnedBuffer scalars_host_;   // [0, 8): norm readback
  PinnedBuffer staging_;        // state transfers, in pieces
  bool host_behind_ = false;    // an update since the last download or upload
  // ResidentWithStreamedOptimizer units, in unit order; their ring and its kernels' stream.
  std::vector<size_t> streamed_;
  std::unique_ptr<DeviceAdamW> streamed_adamw_;  // on the bulk h2d stream
  size_t piece_ = 0;                             // parameters of a slot's piece
  std::vector<DeviceBuffer> ring_;               // per slot: master, m, v of a piece, one after the other
  std::vector<EventId> slot_free_;               // per slot: its last piece went down (bulk d2h)
  size_t next_slot_ = 0;
  std::vector<EventId> streamed_done_;  // per unit: streamed_update_done
};

}  // namespace ferry
