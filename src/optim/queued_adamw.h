// DeviceAdamW for a device whose streams are host threads (SimDevice): each call queues the plain
// reference (adamw_step, clip.cpp's sums and coefficient) as a host task on the stream, where a
// GPU would run kernels, so it runs after everything issued to the stream before it and reads
// the "device" memory (host memory on such a device) in stream order.
//
// Each call copies its arguments (the segments included); the buffers must stay valid until the
// task has run, as for a kernel launch.
#pragma once

#include "optim/device_adamw.h"

namespace ferry {

class QueuedAdamW final : public DeviceAdamW {
 public:
  QueuedAdamW(Device& device, StreamKind stream);

  void step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments, const AdamWHyper& hyper,
            int64_t step, const float* grad_scale) override;
  void grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) override;
  void accumulate(const double* partials, size_t count, double* sum) override;
  void clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) override;
  void write_weights(const float* master, void* weights, DType dtype, size_t n) override;

 private:
  Device& device_;
  StreamKind stream_;
};

}  // namespace ferry
