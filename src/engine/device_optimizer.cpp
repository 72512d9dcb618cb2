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
  size_t partials = 0;
  for (size_t u = 0; u < count; ++u) {
    if (plan_.units[u] != UnitPlacement::ResidentWithOptimizer) continue;
    units_.push_back(u);
    const size_t bytes = round_to_256(static_cast<size_t>(layout_.units[u].numel) * sizeof(float));
    master_[u] = DeviceBuffer(device_, bytes, "fp32 masters");
    m_[u] = DeviceBuffer(device_, bytes, "AdamW m");
    v_[u] = DeviceBuffer(device_, bytes, "AdamW v");
    partial_offset_[u] = partials;
    partial_count_[u] = grad_norm_partials(layout_.units[u]);
    partials += partial_count_[u];
  }
  FERRY_ASSERT(!units_.empty(), "a DeviceOptimizer without device units");
  // The same sizes the memory model counts (gpu_optimizer_bytes).
  const GpuOptimizerBytes g = gpu_optimizer_bytes(layout_, plan_);
  FERRY_ASSERT(g.partials == partials);
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

void DeviceOptimizer::upload_state() {
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
  issue_unit_norm_partials(*adamw_, layout_.units[u], grads_[u].data(), DType::F32, partials);
  if (plan_.optimizer_on_gpu()) return;  // summed on the device by update_all
  device_.wait(StreamKind::DeviceToHost, device_.record(StreamKind::Compute));
  double* host = partials_host_.as<double>() + partial_offset_[u];
  device_.copy_to_host(host, partials, partial_count_[u] * sizeof(double), StreamKind::DeviceToHost);
  host_.partials_landed(u, device_.record(StreamKind::DeviceToHost), host, partial_count_[u]);
  if (plan_.update == UpdateSchedule::DuringBackward) update(u, step, hyper, nullptr);
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
    if (plan_.units[u] == UnitPlacement::ResidentWithOptimizer) {
      adamw_->accumulate(partials_.as<double>() + partial_offset_[u], partial_count_[u], sum);
    } else {
      FERRY_ASSERT(host_units.data != nullptr && host_units.offset != nullptr,
                   "the host units' norm partials are needed to clip beside them");
      adamw_->accumulate(host_units.data + (*host_units.offset)[u], grad_norm_partials(layout_.units[u]),
                         sum);
    }
  }
  adamw_->clip_coefficient(sum, max_grad_norm, clip);
  for (size_t u : units_) update(u, step, hyper, clip);
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
