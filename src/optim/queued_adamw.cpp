#include "optim/queued_adamw.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "optim/clip.h"

namespace ferry {

QueuedAdamW::QueuedAdamW(Device& device, StreamKind stream) : device_(device), stream_(stream) {}

void QueuedAdamW::step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments,
                       const AdamWHyper& hyper, int64_t step, const float* grad_scale) {
  FERRY_ASSERT(unit.grad_dtype == DType::F32, "the reference AdamW takes fp32 gradients");
  // On the issuing thread, where a failed check names the caller.
  check_adamw_unit(unit, segments, step);
  device_.host_task(stream_, [unit, segs = std::vector<AdamWSegment>(segments.begin(), segments.end()), hyper,
                              step, grad_scale] {
    const float scale = grad_scale != nullptr ? *grad_scale : 1.0f;
    const float* grad = static_cast<const float*>(unit.grad);
    for (const AdamWSegment& s : segs) {
      adamw_step(unit.master + s.offset, unit.m + s.offset, unit.v + s.offset, grad + s.offset, s.count,
                 hyper, step, s.decay, scale);
      if (unit.bf16_out != nullptr)
        convert_from_f32(unit.master + s.offset, DType::BF16, unit.bf16_out + s.offset, s.count);
    }
  });
}

void QueuedAdamW::grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) {
  device_.host_task(stream_, [grad, grad_dtype, n, partials] {
    const GradSpan span{grad, n, grad_dtype};
    const std::vector<double> sums = ferry::grad_sumsq_partials(std::span<const GradSpan>(&span, 1));
    if (!sums.empty()) std::memcpy(partials, sums.data(), sums.size() * sizeof(double));
  });
}

void QueuedAdamW::accumulate(const double* partials, size_t count, double* sum) {
  device_.host_task(stream_, [partials, count, sum] {
    double total = *sum;
    for (size_t k = 0; k < count; ++k) total += partials[k];
    *sum = total;
  });
}

void QueuedAdamW::clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) {
  device_.host_task(stream_, [sum_of_squares, max_norm, coefficient] {
    *coefficient = ferry::clip_coefficient(std::sqrt(*sum_of_squares), max_norm);
  });
}

void QueuedAdamW::write_weights(const float* master, void* weights, DType dtype, size_t n) {
  device_.host_task(stream_, [master, weights, dtype, n] { convert_from_f32(master, dtype, weights, n); });
}

}  // namespace ferry
