#include "engine/device_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "device/trace/trace_scope.h"
#include "optim/clip.h"
#include "planner/memory_model.h"

namespace ferry {

namespace {

constexpr size_t kSumOffset = 0, kClipOffset = 8;

}  // namespace

DeviceOptimizer::DeviceOptimizer(Device& device, Ops& ops, const ModelLayout& layout, const Plan& plan,
                                 UnitUpdater& host, const std::vector<DeviceBuffer>& weights,
                                 const std::vector<DeviceBuffer>& grads)
    : device_(device),
      ops_(ops),
      layout_(layout),
      plan_(plan),
      host_(host),
      weights_(weights),
      grads_(grads),
      adamw_(make_device_adamw(device)) {
  const size_t count = layout_.units.size();
  master_.resize(count);
  m_.resize(count);
  v_.resize(count);
  partial_offset_.assign(count, 0);
  partial_count_.assign(count, 0);
  streamed_done_.assign(count, -1);
  size_t partials = 0;
  for (size_t u = 0; u < count; ++u) {
    if (!updated_on_device(plan_.units[u])) continue;
    partial_offset_[u] = partials;
    partial_count_[u] = grad_norm_partials(layout_.units[u]);
    partials += partial_count_[u];
    if (plan_.units[u] == UnitPlacement::ResidentWithStreamedOptimizer) {
      streamed_.push_back(u);
      continue;
    }
    units_.push_back(u);
    const size_t bytes = round_to_256(static_cast<size_t>(layout_.units[u].numel) * sizeof(float));
    master_[u] = DeviceBuffer(device_, bytes, "fp32 masters");
    m_[u] = DeviceBuffer(device_, bytes, "AdamW m");
    v_[u] = DeviceBuffer(device_, bytes, "AdamW v");
  }
  FERRY_ASSERT(!units_.empty() || !streamed_.empty(), "a DeviceOptimizer without device units");
  // The same sizes the memory model counts (gpu_optimizer_bytes).
  const GpuOptimizerBytes g = gpu_optimizer_bytes(layout_, plan_);
  FERRY_ASSERT(g.partials == partials);
  if (!streamed_.empty()) {
    piece_ = g.streamed_piece;
    for (size_t k = 0; k < kStreamedStateSlots; ++k)
      ring_.emplace_back(device_, 3 * round_to_256(piece_ * sizeof(float)), "streamed optimizer state ring");
    slot_free_.assign(kStreamedStateSlots, -1);
    streamed_adamw_ = make_device_adamw(device_, StreamKind::BulkHostToDevice);
  }
  partials_ = DeviceBuffer(device_, round_to_256(partials * sizeof(double)), "gradient norm partials");
  scalars_ = DeviceBuffer(device_, 256, "gradient norm and clip coefficient");
  if (!plan_.optimizer_on_gpu())
    partials_host_ = PinnedBuffer(device_, partials * sizeof(double), "gradient norm partials readback");
  scalars_host_ = PinnedBuffer(device_, 256, "gradient norm and clip coefficient staging");
  staging_ = PinnedBuffer(device_, g.staging_elements * sizeof(float), "optimizer state staging");
}

void DeviceOptimizer::copy_in(void* device_dst, const float* host_src, size_t n) {
  const size_t piece = staging_.bytes() / sizeof(float);
  for (size_t done = 0; done < n; done += piece) {
    const size_t k = std::min(piece, n - done);
    std::memcpy(staging_.data(), host_src + done, k * sizeof(float));
    device_.copy_to_device(static_cast<float*>(device_dst) + done, staging_.data(), k * sizeof(float),
                           StreamKind::HostToDevice);
    device_.synchronize(device_.record(StreamKind::HostToDevice));
  }
}

void DeviceOptimizer::copy_out(float* host_dst, const void* device_src, size_t n) {
  const size_t piece = staging_.bytes() / sizeof(float);
  for (size_t done = 0; done < n; done += piece) {
    const size_t k = std::min(piece, n - done);
    device_.copy_to_host(staging_.data(), static_cast<const float*>(device_src) + done, k * sizeof(float),
                         StreamKind::DeviceToHost);
    device_.synchronize(device_.record(StreamKind::DeviceToHost));
    std::memcpy(host_dst + done, staging_.data(), k * sizeof(float));
  }
}

DType DeviceOptimizer::grad_dtype(size_t u) const {
  return plan_.units[u] == UnitPlacement::ResidentWithOptimizer ? DType::F32 : plan_.grad_dtype;
}

namespace {

// The segments of [begin, begin + count) of a unit, as offsets into that piece.
std::vector<AdamWSegment> piece_segments(const std::vector<AdamWSegment>& segments, size_t begin,
                                         size_t count) {
  std::vector<AdamWSegment> out;
  for (const AdamWSegment& s : segments) {
    const size_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.count, begin + count);
    if (lo < hi) out.push_back({lo - begin, hi - lo, s.decay});
  }
  return out;
}

}  // namespace

void DeviceOptimizer::stream_update(size_t u, int64_t step, const AdamWHyper& hyper,
                                    const float* grad_scale) {
  const TraceScope scope(device_, "update", layout_.units[u].name);
  HostUnitState& h = host_.unit(u);
  const size_t n = static_cast<size_t>(layout_.units[u].numel),
               slot_stride = round_to_256(piece_ * sizeof(float));
  const size_t grad_size = dtype_size(grad_dtype(u)), weight_size = dtype_size(plan_.weight_dtype);
  const bool bf16 = plan_.weight_dtype == DType::BF16;
  for (size_t begin = 0; begin < n; begin += piece_) {
    const size_t count = std::min(piece_, n - begin), slot = next_slot_++ % kStreamedStateSlots;
    if (slot_free_[slot] >= 0) device_.wait(StreamKind::BulkHostToDevice, slot_free_[slot]);
    char* base = static_cast<char*>(ring_[slot].data());
    float* arrays[3] = {reinterpret_cast<float*>(base), reinterpret_cast<float*>(base + slot_stride),
                        reinterpret_cast<float*>(base + 2 * slot_stride)};
    float* host[3] = {h.master.data() + begin, h.m.data() + begin, h.v.data() + begin};
    for (int a = 0; a < 3; ++a)
      device_.copy_to_device(arrays[a], host[a], count * sizeof(float), StreamKind::BulkHostToDevice);
    AdamWUnitBuffers b;
    b.master = arrays[0];
    b.m = arrays[1];
    b.v = arrays[2];
    b.grad = static_cast<const char*>(grads_[u].data()) + begin * grad_size;
    b.grad_dtype = grad_dtype(u);
    void* weights = static_cast<char*>(weights_[u].data()) + begin * weight_size;
    if (bf16) b.bf16_out = static_cast<uint16_t*>(weights);  // the new weights in the same pass
    streamed_adamw_->step(b, piece_segments(host_.segments(u), begin, count), hyper, step, grad_scale);
    if (!bf16) streamed_adamw_->write_weights(arrays[0], weights, plan_.weight_dtype, count);
    const EventId updated = device_.record(StreamKind::BulkHostToDevice);
    device_.wait(StreamKind::BulkDeviceToHost, updated);
    for (int a = 0; a < 3; ++a)
      device_.copy_to_host(host[a], arrays[a], count * sizeof(float), StreamKind::BulkDeviceToHost);
    slot_free_[slot] = device_.record(StreamKind::BulkDeviceToHost);
    streamed_done_[u] = updated;
  }
}

void DeviceOptimizer::upload_streamed_weights(size_t u) {
  const size_t n = static_cast<size_t>(layout_.units[u].numel), weight_size = dtype_size(plan_.weight_dtype);
  float* piece = ring_[0].as<float>();
  for (size_t begin = 0; begin < n; begin += piece_) {
    const size_t count = std::min(piece_, n - begin);
    device_.copy_to_device(piece, host_.unit(u).master.data() + begin, count * sizeof(float),
                           StreamKind::BulkHostToDevice);
    streamed_adamw_->write_weights(piece, static_cast<char*>(weights_[u].data()) + begin * weight_size,
                                   plan_.weight_dtype, count);
    device_.synchronize(device_.record(StreamKind::BulkHostToDevice));
  }
}

void DeviceOptimizer::upload_state() {
  for (size_t u : streamed_) upload_streamed_weights(u);
  std::fill(slot_free_.begin(), slot_free_.end(), EventId{-1});
  std::fill(streamed_done_.begin(), streamed_done_.end(), EventId{-1});
  for (size_t u : units_) {
    HostUnitState& h = host_.unit(u);
    const size_t n = h.master.size();
    copy_in(master_[u].data(), h.master.data(), n);
    copy_in(m_[u].data(), h.m.data(), n);
    copy_in(v_[u].data(), h.v.data(), n);
    // The weights the device computes with are the masters in the weight dtype, rounded as the
    // host's staging would round them (ops copy: nearest even, as convert_from_f32).
    const int64_t count = static_cast<int64_t>(n);
    ops_.copy(Tensor(master_[u].data(), DType::F32, {count}),
              Tensor(weights_[u].data(), plan_.weight_dtype, {count}));
  }
  device_.synchronize(device_.record(StreamKind::Compute));
  host_behind_ = false;
}

void DeviceOptimizer::download_state() {
  // The streamed units' state is the host's once their last pieces are down.
  if (!streamed_.empty()) device_.synchronize(device_.record(StreamKind::BulkDeviceToHost));
  if (!host_behind_) return;
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  for (size_t u : units_) {
    HostUnitState& h = host_.unit(u);
    const size_t n = h.master.size();
    copy_out(h.master.data(), master_[u].data(), n);
    copy_out(h.m.data(), m_[u].data(), n);
    copy_out(h.v.data(), v_[u].data(), n);
  }
  host_behind_ = false;
}

void DeviceOptimizer::update(size_t u, int64_t step, const AdamWHyper& hyper, const float* grad_scale) {
  // The device AdamW's calls do not say which unit they update; the trace names them here.
  const TraceScope scope(device_, "update", layout_.units[u].name);
  AdamWUnitBuffers b;
  b.master = master_[u].as<float>();
  b.m = m_[u].as<float>();
  b.v = v_[u].as<float>();
  b.grad = grads_[u].data();
  b.grad_dtype = DType::F32;
  const bool bf16 = plan_.weight_dtype == DType::BF16;
  if (bf16) b.bf16_out = weights_[u].as<uint16_t>();  // the new weights in the same pass
  adamw_->step(b, host_.segments(u), hyper, step, grad_scale);
  if (!bf16) {
    const int64_t n = layout_.units[u].numel;
    ops_.copy(Tensor(master_[u].data(), DType::F32, {n}),
              Tensor(weights_[u].data(), plan_.weight_dtype, {n}));
  }
  host_behind_ = true;
}

size_t issue_unit_norm_partials(DeviceAdamW& kernels, const UnitLayout& unit, const void* grads,
                                DType grad_dtype, double* partials) {
  const size_t size = dtype_size(grad_dtype);
  size_t count = 0;
  for (const auto& p : unit.params) {
    kernels.grad_sumsq_partials(static_cast<const char*>(grads) + static_cast<size_t>(p.offset) * size,
                                grad_dtype, static_cast<size_t>(p.numel), partials + count);
    count += grad_sumsq_chunks(static_cast<size_t>(p.numel));
  }
  return count;
}

void DeviceOptimizer::gradient_done(size_t u, int64_t step, const AdamWHyper& hyper) {
  // The previous step's copy of this slice left the device before that step returned (the engine
  // synchronizes the d2h stream at every step's end).
  double* partials = partials_.as<double>() + partial_offset_[u];
  issue_unit_norm_partials(*adamw_, layout_.units[u], grads_[u].data(), grad_dtype(u), partials);
  if (plan_.optimizer_on_gpu()) return;  // summed on the device by update_all
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  double* host = partials_host_.as<double>() + partial_offset_[u];
  device_.copy_to_host(host, partials, partial_count_[u] * sizeof(double), StreamKind::DeviceToHost);
  host_.partials_landed(u, device_.record(StreamKind::DeviceToHost), host, partial_count_[u]);
  if (plan_.update != UpdateSchedule::DuringBackward) return;
  if (plan_.units[u] == UnitPlacement::ResidentWithOptimizer) {
    update(u, step, hyper, nullptr);
    return;
  }
  device_.wait(StreamKind::BulkHostToDevice, device_.record(StreamKind::Compute));  // its backward
  stream_update(u, step, hyper, nullptr);
}

void DeviceOptimizer::update_all(int64_t step, const AdamWHyper& hyper, double max_grad_norm,
                                 HostUnitPartials host_units) {
  FERRY_ASSERT(plan_.optimizer_on_gpu() || plan_.update == UpdateSchedule::AfterBackward);
  char* scalars = static_cast<char*>(scalars_.data());
  double* sum = reinterpret_cast<double*>(scalars + kSumOffset);
  float* clip = reinterpret_cast<float*>(scalars + kClipOffset);
  device_.fill_zero(sum, sizeof(double), StreamKind::Compute);
  // Every unit's partials in unit order, the order the UnitUpdater concatenates them in.
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    if (updated_on_device(plan_.units[u])) {
      adamw_->accumulate(partials_.as<double>() + partial_offset_[u], partial_count_[u], sum);
    } else {
      FERRY_ASSERT(host_units.data != nullptr && host_units.offset != nullptr,
                   "the host units' norm partials are needed to clip beside them");
      adamw_->accumulate(host_units.data + (*host_units.offset)[u], grad_norm_partials(layout_.units[u]),
                         sum);
    }
  }
  adamw_->clip_coefficient(sum, max_grad_norm, clip);
  // The streamed units' pieces wait for the clip coefficient alone, not for the updates below.
  if (!streamed_.empty()) device_.wait(StreamKind::BulkHostToDevice, device_.record(StreamKind::Compute));
  for (size_t u : units_) update(u, step, hyper, clip);
  for (size_t u : streamed_) stream_update(u, step, hyper, clip);
  if (!plan_.optimizer_on_gpu()) return;  // the host has the norm from the same partials
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  device_.copy_to_host(static_cast<char*>(scalars_host_.data()) + kSumOffset, sum, sizeof(double),
                       StreamKind::DeviceToHost);
}

double DeviceOptimizer::read_norm() const {
  FERRY_ASSERT(plan_.optimizer_on_gpu());
  double sum;
  std::memcpy(&sum, static_cast<const char*>(scalars_host_.data()) + kSumOffset, sizeof(double));
  return std::sqrt(sum);
}

}  // namespace ferry
