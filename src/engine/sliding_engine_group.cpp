// The sliding engine as one device of a group (engine/device_share.h): what differs from a device
// alone is how a unit's weights come up and how its gradient goes down; everything else is the
// same schedule over the device's share of the step's micro-chunks.
#include "core/error.h"
#include "device/trace/trace_scope.h"
#include "engine/sliding_engine.h"
#include "optim/device_adamw.h"

namespace ferry {

void SlidingEngine::check_group_plan() const {
  FERRY_CHECK(share_->size >= 1 && share_->rank >= 0 && share_->rank < share_->size, "engine",
              "rank {} of a group of {} devices", share_->rank, share_->size);
  for (int s = 0; s < kCollectiveStreamCount; ++s)
    FERRY_CHECK(share_->collectives[static_cast<size_t>(s)] != nullptr &&
                    share_->collectives[static_cast<size_t>(s)]->size() == share_->size,
                "engine", "a device of a group of {} needs a communicator of {} ranks for each stream",
                share_->size, share_->size);
  FERRY_CHECK(share_->rank == 0 || share_->host != nullptr, "engine",
              "rank {} of a group needs rank 0's host state", share_->rank);
  // Every device's share lands in the one pinned staging buffer per unit; the ring of gradient
  // buffers and the per-unit buffers of converting on upload are not built for several devices.
  FERRY_CHECK(plan_.weight_upload == WeightUpload::HostShadow, "engine",
              "several devices upload weights from the bf16 staging (weight_upload: host-shadow); "
              "convert-on-upload is for one device");
  // A unit updated on a device would need its optimizer state on every device of the group.
  FERRY_CHECK(!roles_.any_device_updated(), "engine",
              "several devices update every unit on the host: place no unit ResidentWithOptimizer "
              "(a plan for gpus > 1 never does)");
}

void SlidingEngine::upload_weight_shard(size_t u, void* device_dst) {
  const size_t n = static_cast<size_t>(layout_.units[u].numel), es = dtype_size(plan_.weight_dtype);
  const UnitShard s = unit_shard(n, share_->rank, share_->size);
  const char* staging = static_cast<const char*>(updater_->unit(u).staging.data());
  char* dst = static_cast<char*>(device_dst);
  if (s.per_rank > 0)
    device_.copy_to_device(dst + s.begin * es, staging + s.begin * es, s.per_rank * es,
                           StreamKind::HostToDevice);
  if (s.tail_begin < n)
    device_.copy_to_device(dst + s.tail_begin * es, staging + s.tail_begin * es, (n - s.tail_begin) * es,
                           StreamKind::HostToDevice);
  // In place: this rank's shard is already where the gathered unit has it.
  if (s.per_rank > 0)
    share_->on(StreamKind::HostToDevice)
        .all_gather(dst + s.begin * es, dst, s.per_rank, plan_.weight_dtype, StreamKind::HostToDevice);
}

EventId SlidingEngine::send_gradient_shard(size_t unit, int64_t slot) {
  const TraceScope scope(device_, "gradients", layout_.units[unit].name);
  const DType gd = plan_.grad_dtype;
  const size_t n = static_cast<size_t>(layout_.units[unit].numel), es = dtype_size(gd);
  char* grads = static_cast<char*>(unit_grads_ptr(unit, slot));
  // Every rank then holds the step's gradient: the sum of the ranks' in rank order. An all-reduce
  // rather than a reduce-scatter, so that rank 0 computes the unit's norm partials over whole
  // 8Ki-element blocks in clip.h's order, as one device does (the host's norm is then the one
  // device's function of the summed gradient), and the row-sparse embedding gathers its rows
  // from the summed table.
  share_->on(StreamKind::Compute).all_reduce(grads, grads, n, gd, StreamKind::Compute);
  double* partials = buffers_.host_unit_partials.as<double>() + buffers_.host_partial_offset[unit];
  size_t count = 0;
  if (owns_host())
    count = issue_unit_norm_partials(*norm_partials_, layout_.units[unit], grads, gd, partials);

  // Where the unit's gradient lands on the host: its staging, or the step's row buffer
  // (gradient_inbox.h); every rank writes its part there, rank 0 alone reserves and announces it.
  char* landing = static_cast<char*>(updater_->row_sparse(unit) ? updater_->row_gradients()
                                                                : updater_->unit(unit).staging.data());
  GradientBuffer buffer;
  if (owns_host()) {
    buffer = updater_->reserve_gradient_buffer(unit, StreamKind::DeviceToHost);
    FERRY_ASSERT(buffer.data == landing && buffer.ring_ticket < 0);
  }
  if (updater_->row_sparse(unit)) {
    // This rank's rows of the step's (device_share.h row_shard), gathered from the summed table
    // into the activation-gradient buffer (free now: the embedding's backward read it last).
    const int64_t H = config_.hidden_size;
    const Tensor table = embedding_table(layout_, grads, gd);
    const Tensor rows(buffers_.chunk_grads.data(), gd, {step_rows_, H});
    if (step_rows_ > 0) ops_.embedding_forward(step_row_ids_, table, rows);
    device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
    if (step_rows_ > 0)
      device_.copy_to_host(landing + static_cast<size_t>(step_row_offset_ * H) * es, rows.data,
                           static_cast<size_t>(step_rows_ * H) * es, StreamKind::DeviceToHost);
  } else {
    const UnitShard s = unit_shard(n, share_->rank, share_->size);
    device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
    if (s.send_end > s.begin)
      device_.copy_to_host(landing + s.begin * es, grads + s.begin * es, (s.send_end - s.begin) * es,
                           StreamKind::DeviceToHost);
  }
  double* host_partials = buffers_.host_unit_partials_host.as<double>() + buffers_.host_partial_offset[unit];
  if (owns_host())
    device_.copy_to_host(host_partials, partials, count * sizeof(double), StreamKind::DeviceToHost);
  // The fence: no rank passes it before every rank's copy above is done (each rank's d2h stream
  // reaches it only then), so rank 0's event after it says that the whole gradient has landed.
  share_->on(StreamKind::DeviceToHost)
      .all_reduce(landing_fence_.data(), landing_fence_.data(), 1, DType::F32, StreamKind::DeviceToHost);
  const EventId landed = device_.record(StreamKind::DeviceToHost);
  if (owns_host()) updater_->gradient_landed(unit, buffer, landed, host_partials, count);
  return landed;
}

}  // namespace ferry
