// The CPU side of a step: fp32 masters and AdamW state of every unit in host memory, and a worker
// thread that turns gradients arriving from the device into updated weights (DESIGN.md §2).
//
// For each unit the engine announces "its gradient for step s lands in grad_host when event e
// completes, with its squared-norm partials (computed on the device)". The worker waits for the
// event, files the partials, and then
//  * UpdateSchedule::DuringBackward: updates the unit at once (no clipping);
//  * UpdateSchedule::AfterBackward: once every unit has landed, computes the global norm and the
//    clip coefficient, then updates the units embedding first, layer 0 next, ... so the next
//    step's forward can start on the first units while the last ones are still being updated.
// Each update writes the fp32 master, m and v, and the weights in the device's dtype into the
// pinned `staging` buffer the next upload reads. The engine waits for a unit's update before
// uploading it.
//
// One pinned buffer per unit carries both directions. The gradient of step s is copied into the
// unit's staging buffer, over the weights of step s-1: the backward's upload of the unit (the
// last reader of those weights in step s) completed before the backward that produced the
// gradient ran, and nothing reads the buffer again until the unit's update has written the new
// weights over the gradient, element by element (cpu_adamw.h). So the host holds 2 bytes/param of
// pinned memory (bf16) instead of 4 (a weight shadow and a gradient buffer); the gradient dtype
// must therefore have the size of the weight dtype.
//
// With WeightUpload::ConvertOnUpload there are no staging buffers: each host-updated unit's fp32
// masters are registered as pinned memory and uploaded as they are (the device writes the weights
// from them), the update writes no weight copy, and gradients land where gradient_landing()
// (planner/memory_model.h) says: in a buffer of the unit's own, or in a ring of buffers the
// decoder layers take in turn without clipping. The d2h into a ring buffer is preceded, on the
// d2h stream, by a wait until the update of the gradient before it there has read it
// (reserve_gradient_buffer). The master of a unit is written by its update only after its
// gradient landed, and that gradient was computed after the last upload of the step read it.
//
// Units placed ResidentWithOptimizer are updated on the device (DeviceOptimizer); here they keep
// only the fp32 master, m and v that checkpoints read and loads write. Those placed
// ResidentWithStreamedOptimizer are updated on the device too, from and into their master, m and v
// here (pinned: the device copies them in pieces every step). For both, when host-updated
// units share the step, their norm partials arrive (computed on the device) through
// partials_landed() so that the global norm covers every unit.
//
// The embedding of an untied model updated here (row_sparse_embedding()) has a gradient only on
// the rows of the step's token ids. Its update is split in two passes of the same per-element
// AdamW: once the step's forward has uploaded the embedding (weights_uploaded), every other row is
// updated with a zero gradient while the device computes; at the step's end the device gathers the
// token rows' gradients into row_gradients() and only those rows are left to update. The staging
// buffer then keeps its weights (the gradient arrives elsewhere), and what waits on the step's end
// is the token rows' share of the pass, not the whole table.
//
// The math is exactly UnitOptimizer's (the plain trainer's): the same AdamW per parameter, the same
// global norm (gradient partials are concatenated in unit order), the same clip coefficient.
//
// With a lean optimizer_state (Plan::optimizer_state, optim/state_format.h) each unit keeps that
// format's arrays instead of fp32 master, m and v, the update is lean_adamw_step / lean_adamw_rows
// on them (the plain trainer's UnitOptimizer makes the same calls), and the weights to upload are
// the decoded masters.
//
// The state arrays are HostArrays: 2 MiB-aligned, advised into transparent huge pages (the
// constructor logs where the kernel refuses), allocated once.
//
// Units the plan puts in the disk tier (Plan::state_on_disk) have no arrays here, in any format:
// their state is in a DiskStateTier (engine/disk_state_tier.h) as the format's opaque arrays, and
// the worker's update of such a unit is bracketed by acquire (its state read into a RAM slot, read
// ahead of the order) and release (written back behind); a lean format's view of the unit is made
// over the slot for the update. Everything else reaches their state through copy_state_out/_in,
// assign_masters and read_masters.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "device/device.h"
#include "engine/disk_state_tier.h"
#include "engine/gradient_inbox.h"
#include "model/unit_layout.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "optim/host_array.h"
#include "optim/lean_adamw.h"
#include "planner/plan.h"

namespace ferry {

struct HostUnitState {
  // fp32 (optimizer_state: fp32): master, m, v, laid out as the unit. A lean format leaves them
  // empty and keeps its arrays (state_arrays(format), in that order) in `lean`, viewed by
  // `lean_view`.
  HostArray master, m, v;  // empty for a unit in the disk tier
  std::vector<HostArray> lean;
  LeanUnitState lean_view;
  // HostShadow: the weights to upload (plan's weight dtype), or, from the gradient's d2h until the
  // update, the gradient (plan's grad dtype, same size). None for a unit updated on the device.
  PinnedBuffer staging;
  // ConvertOnUpload: the registration of its masters as pinned memory (released before the
  // masters are unmapped); ResidentWithStreamedOptimizer: of its masters, m and v.
  PinnedRegistration pinned_master, pinned_m, pinned_v;

  // The unit's optimizer state as its arrays, in state_arrays(format) order: fp32's master, m, v,
  // or a lean format's; each a contiguous mapping whose size depends on the format and numel only.
  std::vector<HostArray*> state(OptimizerStateFormat format);
};

class UnitUpdater {
 public:
  // `max_rows`: the most distinct token ids a step can have (max_embedding_rows()). The row-sparse
  // embedding's gradients land in `row_gradients` (pinned, at least max_rows rows) when given,
  // else in a buffer of the updater's own.
  UnitUpdater(Device& device, const ModelLayout& layout, const Plan& plan, bool decay_all, int64_t max_rows,
              void* row_gradients = nullptr);
  ~UnitUpdater();
  UnitUpdater(const UnitUpdater&) = delete;
  UnitUpdater& operator=(const UnitUpdater&) = delete;

  HostUnitState& unit(size_t u) { return units_[u]; }
  // Commits every page of the masters, m and v now (HostArray::commit), so that the first update's
  // writes do not fault 8 bytes per parameter inside a step, and a host that cannot hold the state
  // says so before training. Called once the masters are assigned and the loaded weights they came
  // from are freed: committed while those live, the state would hold 16 bytes per parameter, 4
  // more than any plan counts (the 8B run's OOM kill at start).
  void commit_state();
  // WeightUpload::ConvertOnUpload: uploads read the fp32 masters (pinned), not a staging buffer.
  bool converts_on_upload() const { return plan_.weight_upload == WeightUpload::ConvertOnUpload; }
  // The unit's parameters as AdamW segments (offset, count, weight decay or not).
  const std::vector<AdamWSegment>& segments(size_t u) const { return segments_[u]; }
  size_t unit_count() const { return units_.size(); }

  // Whether unit u is updated here (not updated_on_device).
  bool on_host(size_t u) const { return on_host_[u]; }
  // Whether unit u's state is in the disk tier (its HostUnitState arrays are empty).
  bool on_disk(size_t u) const { return disk_ && disk_->holds(u); }
  // Unit u's state arrays (optim/state_arrays.h), copied out or in, from RAM or the disk tier.
  // Between steps only (finish_updates first): loading weights, checkpoints, resume.
  void copy_state_out(size_t u, const std::vector<std::span<std::byte>>& arrays);
  void copy_state_in(size_t u, const std::vector<std::span<const std::byte>>& arrays);
  // Disk unit u's state arrays in the tier's RAM buffer, valid until the next call that reaches the
  // tier (any of these, a step): checkpoints stream the disk units' state through it instead of a
  // copy. Between steps only. After changing the arrays, disk_state_written(u) stores them.
  std::vector<std::span<std::byte>> disk_state(size_t u) { return disk_->page_in(u); }
  // The same for arrays the caller overwrites whole (a resume): not read from the disk first, and
  // disk_state_written(u) converts the staging weights from them before it writes them behind.
  std::vector<std::span<std::byte>> disk_state_new(size_t u);
  void disk_state_written(size_t u);
  // The disk tier, when the plan has one.
  const DiskStateTier* disk() const { return disk_.get(); }
  // Unit u's weights as the run uploads them (its staging buffer), when that is `dtype`, else
  // nullptr. Between steps (finish_updates first) they are the masters converted to the weight
  // dtype: every update writes that copy beside the masters, and loading or resuming refreshes it.
  const void* staged_weights(size_t u, DType dtype) const {
    if (!on_host_[u] || converts_on_upload() || dtype != plan_.weight_dtype) return nullptr;
    return units_[u].staging.data();
  }
  // Waits for the disk tier's writes in flight (the first state assign_masters wrote behind).
  void wait_disk_writes() {
    if (disk_) disk_->flush();
  }

  // The optimizer state format (plan's optimizer_state).
  OptimizerStateFormat format() const { return plan_.optimizer_state; }
  // Sets unit u's masters from fp32 values (loading a model): the fp32 array, or a lean format's
  // encoding of them (nearest rounding). A disk unit's fresh state is written through a slot of
  // the tier without reading the file (DiskStateTier::page_new), and its staging weights are
  // converted from that slot there and then, so that refresh_staging does not read it back.
  void assign_masters(size_t u, std::span<const float> values);
  // Where a load may write unit u's fp32 values in place of assign_masters: its fp32 masters, in
  // RAM (exact state, not in the disk tier); empty where the values must go through assign_masters
  // (a lean format encodes them, a disk unit writes them through the tier). Writing them there
  // first-touches the masters' pages on the writer's threads, which is the copy assign_masters
  // would make, without the fp32 buffer it copies from (planner/memory_model.h loaded_weights).
  std::span<float> masters_to_load(size_t u) {
    if (!is_exact(format()) || on_disk(u)) return {};
    return units_[u].master.span();
  }
  // Unit u's masters as fp32 (decoded from a lean format) into `out` (numel floats); a disk
  // unit's are read from the tier (between steps only).
  void read_masters(size_t u, float* out) {
    read_masters(u, out, 0, static_cast<size_t>(layout_.units[u].numel));
  }
  // Elements [begin, end) of unit u's masters as fp32 into out (a disk unit is paged in once and kept).
  void read_masters(size_t u, float* out, size_t begin, size_t end);

  // Writes every host-updated unit's staging weights from its master (after loading or resuming)
  // and marks the state as updated through step `step`.
  void refresh_staging(int64_t step);

  // Step `step` (1-based) is about to be issued with these hyperparameters. `rows`: the step's
  // distinct token ids, sorted (the embedding rows whose gradient may be nonzero).
  void begin_step(int64_t step, const AdamWHyper& hyper, double max_grad_norm, std::vector<int32_t> rows);

  // Whether unit u is the row-sparse embedding (see above).
  bool row_sparse(size_t u) const { return u == sparse_unit_; }
  // Where the row-sparse embedding's gradient lands: the step's rows, in the order of `rows`.
  void* row_gradients() { return inbox_->row_gradients(); }
  // Unit u's weights for the current step have been read from its staging buffer once `event`
  // completes: for the row-sparse embedding, the rows without a gradient are then updated.
  void weights_uploaded(size_t u, EventId event);
  // Where the gradient of host-updated unit u for the current step is to be copied: its staging
  // buffer, its own gradient buffer, or the next ring buffer. For a ring buffer, a wait until the
  // buffer's previous gradient has been read by its update is issued to `stream` first, so the copy
  // must follow on that stream.
  GradientBuffer reserve_gradient_buffer(size_t u, StreamKind stream);
  // The gradient of host-updated unit u for the current step lands in `buffer` (reserved for it)
  // when `event` completes, and its norm partials (`count` doubles, grad_norm_partials of the
  // unit, computed on the device; pinned) in `partials`.
  void gradient_landed(size_t u, const GradientBuffer& buffer, EventId event, const double* partials,
                       size_t count);
  // For a unit updated on the device: its norm partials for the current step are in `partials`
  // when `event` completes.
  void partials_landed(size_t u, EventId event, const double* partials, size_t count);

  // Blocks until host-updated unit u holds the update of step `step` (step 0: the initial
  // weights). Returns at once for a unit updated on the device.
  void wait_updated(size_t u, int64_t step);
  // The row-sparse embedding's token rows are updated range by range of the table, in row order
  // (kRowRanges ranges), and each range is said to be done as soon as it is: the next step's
  // upload of a range (SlidingEngine::upload_when_updated) follows it there instead of waiting for
  // the whole table, so the first ranges cross PCIe while the CPU updates the last.
  static constexpr int64_t kRowRanges = 16;
  // The end of range r (0-based) of a table of `rows` rows; range r is [end(r - 1), end(r)).
  static int64_t row_range_end(int64_t rows, int64_t r) { return rows * (r + 1) / kRowRanges; }
  // The row-sparse embedding's rows.
  int64_t table_rows() const;
  // Blocks until rows [0, end) of the row-sparse embedding hold the update of step `step`.
  void wait_rows_updated(int64_t step, int64_t end);
  // Blocks until every host-updated unit holds the update of step `step`.
  void wait_all_updated(int64_t step);
  // The global gradient norm of step `step` (before clipping); blocks until known.
  double grad_norm(int64_t step);

  // The exact CPU AdamW's passes over whole units held in RAM, timed: the parameters they updated
  // and the seconds they took, from the second step this updater ran on (the first one's pages and
  // caches are cold). Not the embedding's token rows (a pass over scattered rows), nor a lean
  // format's or a disk unit's passes. What a run's updates actually ran at, beside the copies of a
  // step, to hold against the rate its plan took from the machine profile.
  struct CpuUpdateRate {
    double params = 0.0;
    double seconds = 0.0;
    double smallest_unit_params = 0.0;  // of the units timed: a small unit's pass runs in the caches
  };
  CpuUpdateRate cpu_update_rate() const;

 private:
  // Everything the worker needs travels with the landing: begin_step() of the next step may run
  // while this step's updates are still going.
  struct Landing {
    bool zero_rows = false;  // the row-sparse embedding's rows without a gradient, after `event` (an upload)
    size_t unit;
    int64_t step;
    EventId event;
    AdamWHyper hyper;
    double max_grad_norm;
    const double* partials = nullptr;  // the unit's norm partials (pinned)
    size_t partial_count = 0;
    std::shared_ptr<const std::vector<int32_t>> rows;  // the step's rows (row-sparse embedding)
    GradientBuffer gradient;                           // where the gradient landed
  };
  void run();
  void update_unit(size_t u, const void* grad, int64_t step, const AdamWHyper& hyper, float clip,
                   const std::vector<int32_t>* rows);
  // The row-sparse embedding's rows: those in `rows` from row_gradients(), or (rows without a
  // gradient) the complement of `rows` with a zero gradient.
  void update_rows(const std::vector<int32_t>& rows, bool zero_gradient, int64_t step,
                   const AdamWHyper& hyper, float clip);
  // The AdamW pass over table rows `rows`, row k's gradient row k of `grad` (null: zero).
  LeanStepStats update_row_list(std::span<const int32_t> rows, const void* grad, int64_t step,
                                const AdamWHyper& hyper, float clip);
  // The token pass of step `step` has updated rows [0, end) of the row-sparse embedding.
  void rows_updated(int64_t step, int64_t end);
  // The pass of step `step` over the rows without a gradient, once per step (worker only).
  void update_rows_without_gradient(const std::vector<int32_t>& rows, int64_t step, const AdamWHyper& hyper);
  // The unit's staging weights from its masters: `master` (fp32 state), or the lean arrays `lean`
  // views (the unit's own, or a disk unit's slot).
  void refresh_staging(size_t u, const float* master, const LeanUnitState* lean);
  // A lean unit's view of `arrays` (state_arrays(format()) order): a disk unit's slot.
  LeanUnitState lean_view_of(size_t u, const std::vector<std::span<std::byte>>& arrays) const;
  // Unit u's state in RAM for an update: its arrays, or for a disk unit a slot (acquired).
  struct StatePointers {
    float* master;
    float* m;
    float* v;
  };
  StatePointers state_for_update(size_t u);
  void state_updated(size_t u);  // a disk unit's slot goes back to the tier
  // RAM units: their arrays as byte spans.
  std::vector<std::span<std::byte>> ram_arrays(size_t u);
  // Elements [begin, end) of unit u's staging weights from its lean masters, viewed by `lean`,
  // decoded kStagingPiece at a time.
  static constexpr size_t kStagingPiece = size_t{1} << 16;
  void refresh_staging_range(size_t u, const LeanUnitState& lean, size_t begin, size_t end);
  // Says once, the first time a lean update loses updates to its master's rounding.
  void note_lost_updates(const LeanStepStats& stats, size_t u, int64_t step);
  void rethrow_if_failed();

  Device& device_;
  ModelLayout layout_;
  Plan plan_;
  std::vector<HostUnitState> units_;
  std::vector<bool> on_host_;
  // Per unit: a disk unit whose staging weights assign_masters wrote from the state it wrote,
  // unchanged since; the next refresh_staging skips it (and clears this). Bytes, not bits: the
  // worker clears them (state_for_update) as the caller's thread does.
  std::vector<uint8_t> staging_current_;
  std::vector<std::span<std::byte>> new_disk_state_;       // what disk_state_new gave, until written
  size_t new_disk_unit_ = SIZE_MAX;                        // its unit
  std::vector<std::vector<AdamWSegment>> segments_;        // per unit: its parameters and their decay
  size_t sparse_unit_ = SIZE_MAX;                          // the row-sparse embedding, if any
  size_t row_len_ = 0;                                     // its row length (hidden size)
  std::unique_ptr<GradientInbox> inbox_;                   // where gradients land (engine/gradient_inbox.h)
  std::unique_ptr<DiskStateTier> disk_;                    // the disk tier, when the plan has one
  std::shared_ptr<const std::vector<int32_t>> step_rows_;  // the current step's rows
  int64_t zero_rows_step_ = 0;        // the last step whose rows without a gradient are updated (worker only)
  int64_t rows_step_ = 0;             // the token pass of this step has updated the rows [0, rows_done_)
  int64_t rows_done_ = 0;             // (both under mutex_; 0 before any token pass and after a load)
  bool warned_lost_updates_ = false;  // worker only
  int64_t first_timed_step_ = 0;      // worker only: the step of the first update this updater ran
  CpuUpdateRate update_rate_;         // under mutex_

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Landing> queue_;
  std::vector<int64_t> updated_step_;  // per unit: the last step whose update it holds
  int64_t current_step_ = 0;
  AdamWHyper hyper_;
  double max_grad_norm_ = 0.0;
  std::vector<std::vector<double>> partials_;  // per unit, the current step's norm partials
  size_t landed_ = 0;
  int64_t norm_step_ = 0;
  double norm_ = 0.0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace ferry
