// A DeviceAdamW that issues another's work and, while a step is traced (device/trace/tracer.h), brackets
// each call with timeline stamps on its stream, so the trace sees the device-side optimizer (its
// kernels bypass the Ops seam) on the compute track. make_device_adamw puts it around the real one
// when the device carries a tracer.
#pragma once

#include <memory>

#include "device/trace/tracer.h"
#include "optim/device_adamw.h"

namespace ferry {

class TracingAdamW final : public DeviceAdamW {
 public:
  // The tracer must outlive this.
  TracingAdamW(std::unique_ptr<DeviceAdamW> inner, Tracer& tracer, StreamKind stream)
      : inner_(std::move(inner)), tracer_(tracer), stream_(stream) {}

  void step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments, const AdamWHyper& hyper,
            int64_t step, const float* grad_scale) override {
    tracer_.device_work(stream_, "adamw", -1, [&] { inner_->step(unit, segments, hyper, step, grad_scale); });
  }
  void grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) override {
    tracer_.device_work(stream_, "grad_sumsq_partials", -1,
                        [&] { inner_->grad_sumsq_partials(grad, grad_dtype, n, partials); });
  }
  void accumulate(const double* partials, size_t count, double* sum) override {
    tracer_.device_work(stream_, "grad_norm_accumulate", -1,
                        [&] { inner_->accumulate(partials, count, sum); });
  }
  void clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) override {
    tracer_.device_work(stream_, "clip_coefficient", -1,
                        [&] { inner_->clip_coefficient(sum_of_squares, max_norm, coefficient); });
  }

  void write_weights(const float* master, void* weights, DType dtype, size_t n) override {
    tracer_.device_work(stream_, "write_weights", -1,
                        [&] { inner_->write_weights(master, weights, dtype, n); });
  }

 private:
  std::unique_ptr<DeviceAdamW> inner_;
  Tracer& tracer_;
  StreamKind stream_;
};

}  // namespace ferry
