// AdamW over optimizer state that lives in device memory, issued to one of the device's streams:
// what the sliding engine runs for units placed UnitPlacement::ResidentWithOptimizer.
//
// Two implementations, chosen by make_device_adamw from the device:
//  * GpuAdamW (gpu_adamw.h): fused CUDA kernels on the stream's cudaStream_t;
//  * QueuedAdamW (queued_adamw.h): the reference adamw_step and clip.cpp's sums, run as host tasks
//    in stream order on a device whose streams are host threads (SimDevice), so that every
//    schedule with GPU-side AdamW is tested on the CPU, bit for bit against the plain trainer.
// A device that carries a trace recorder gets either wrapped in TracingAdamW (tracing_adamw.h).
// Both compute exactly what the host optimizer computes from the same gradients: AdamW as
// adamw_step, partial sums of squares as clip.h's grad_sumsq_partials (same 8Ki chunks, same
// order), clip coefficients as clip_coefficient. So any split of the units between host and device
// gives the same step.
//
// All pointers are device pointers. Nothing waits for the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "device/device.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"

namespace ferry {

class DeviceAdamW {
 public:
  virtual ~DeviceAdamW() = default;

  // One AdamW step (t = `step`, 1-based) over the elements the segments name (sorted, disjoint).
  // The gradient is multiplied by *grad_scale first (device memory; nullptr: 1). bf16_out, when
  // set, receives bf16(new master).
  virtual void step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments,
                    const AdamWHyper& hyper, int64_t step, const float* grad_scale) = 0;

  // partials[k] = the sum of squares of chunk k (kGradNormChunk elements) of grad[0, n), in double:
  // grad_sumsq_chunks(n) values, those clip.h's grad_sumsq_partials gives for this one span.
  virtual void grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) = 0;

  // *sum = ((*sum + partials[0]) + partials[1]) + ... : norm_from_partials' order.
  virtual void accumulate(const double* partials, size_t count, double* sum) = 0;

  // *coefficient = clip_coefficient(sqrt(*sum_of_squares), max_norm) (clip.h); 1 when max_norm <= 0.
  virtual void clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) = 0;

  // weights[0, n) = master[0, n) in `dtype` (F32, or BF16 rounded to nearest even as
  // convert_from_f32 rounds): the weights an update's fp32 masters give, where the masters (not a
  // bf16 copy of them) were uploaded (WeightUpload::ConvertOnUpload).
  virtual void write_weights(const float* master, void* weights, DType dtype, size_t n) = 0;
};

// GpuAdamW on the native stream of a CUDA device; QueuedAdamW on a device without native streams.
std::unique_ptr<DeviceAdamW> make_device_adamw(Device& device, StreamKind stream = StreamKind::Compute);

}  // namespace ferry
