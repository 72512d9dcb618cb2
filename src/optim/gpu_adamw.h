// AdamW and gradient clipping on the GPU, for units whose optimizer state lives in device memory.
//
// GpuAdamW::step is one fused pass over a unit: per element it reads the gradient (F32 or BF16) and
// the fp32 master, m and v, and writes master, m, v and, when asked, the bf16 copy of the new weight
// (30 bytes per parameter with fp32 gradients and the copy). It performs the same fp32 operations in
// the same order as the reference adamw_step (optim/adamw.h) -- IEEE mul/add/div/sqrt that the
// compiler may not contract, fused multiply-adds exactly where the reference has std::fma -- so the
// result is bit-identical to it and to cpu_adamw_step on the same inputs.
//
// Clipping without a host sync: add_grad_sumsq adds a unit's sum of squares to a device double,
// computed exactly as optim/clip.cpp's grad_sumsq_partials + norm_from_partials (the same 8Ki
// chunks, each summed in the same order with the same four double accumulators, the chunk sums
// added one by one in order), so feeding the units in the CPU's order gives the CPU's norm bit for
// bit; clip_coefficient then turns it into torch's clip_coef_clamped on the device (clip.h), and
// step reads it through its `grad_scale` pointer.
//
// All pointers are device pointers; everything is issued to the stream given at construction and
// nothing waits for the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "optim/device_adamw.h"

namespace ferry {

class GpuAdamW final : public DeviceAdamW {
 public:
  // `stream` is a cudaStream_t (nullptr: the legacy default stream). Throws in a build without CUDA.
  explicit GpuAdamW(void* stream);
  ~GpuAdamW();
  GpuAdamW(const GpuAdamW&) = delete;
  GpuAdamW& operator=(const GpuAdamW&) = delete;

  // One AdamW step (t = `step`, 1-based) over the elements the segments name (sorted by offset,
  // disjoint; other elements untouched). `grad_scale` points to the factor the gradient is
  // multiplied by first (the clip coefficient, on the device); nullptr means 1.
  void step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments, const AdamWHyper& hyper,
            int64_t step, const float* grad_scale) override;

  // *sum_of_squares += the sum of grad^2 over n elements (F32 or BF16), in double, in clip.cpp's
  // order. Zero the accumulator (cudaMemsetAsync) before the first unit of a step. (Partials kept
  // in a buffer of its own; grad_sumsq_partials + accumulate do the same into the caller's.)
  void add_grad_sumsq(const void* grad, DType grad_dtype, size_t n, double* sum_of_squares);

  // One thread per 8Ki chunk, clip.cpp's sum_squares (device_adamw.h).
  void grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) override;
  // One thread adds them in order (device_adamw.h).
  void accumulate(const double* partials, size_t count, double* sum) override;

  // *coefficient = clip_coefficient(sqrt(*sum_of_squares), max_norm) (optim/clip.h), bit for bit.
  void clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) override;

  // A vectorized rounding pass (BF16), or a device copy (F32).
  void write_weights(const float* master, void* weights, DType dtype, size_t n) override;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ferry
