// The launch functions of the GPU AdamW (gpu_adamw_kernels.cu), behind GpuAdamW (gpu_adamw.cpp).
// Plain C++17 (no CUDA types), so the .cu includes it; void* streams are cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>

#include "optim/adamw_scalars.h"

namespace ferry::gpu_adamw {

// The step's scalars (adamw_scalars.h); the kernels read all but decay_factor, which comes per
// segment in UpdateArgs (1 for tensors without decay).
using Scalars = AdamWScalars;

// Elements [0, count) of the given pointers (already offset to the segment).
struct UpdateArgs {
  float* master;
  float* m;
  float* v;
  const void* grad;
  bool grad_bf16;
  uint16_t* bf16_out;  // may be null
  size_t count;
  float decay_factor;       // 1 for tensors without decay
  const float* grad_scale;  // may be null (1)
};

void launch_update(const UpdateArgs& args, const Scalars& s, void* stream);

// Elements per partial sum: clip.cpp's kChunk.
constexpr size_t kSumsqChunk = size_t{1} << 13;
// Columns of a chunk's sum (clip.cpp's kGradNormColumns): a warp's 32 lanes read 4 each.
constexpr int kSumsqColumns = 128;

// partials[c] = clip.cpp's sum_squares of elements [c * kSumsqChunk, ...) of grad, for every chunk.
void launch_sumsq_partials(const void* grad, bool grad_bf16, size_t n, double* partials, void* stream);
// *sum = ((*sum + partials[0]) + partials[1]) + ... (one thread, in order).
void launch_accumulate(const double* partials, size_t count, double* sum, void* stream);
// *coefficient = clip_coefficient(sqrt(*sum), max_norm) with max_norm_f = float(max_norm) and
// shift = float(1e-6); clip = max_norm > 0.
void launch_clip_coefficient(const double* sum, bool clip, float max_norm_f, float shift, float* coefficient,
                             void* stream);

// out[0, n) = bf16(master[0, n)), rounded to nearest even.
void launch_to_bf16(const float* master, uint16_t* out, size_t n, void* stream);
// dst[0, n) = src[0, n) (a device-to-device copy on the stream).
void launch_copy_f32(const float* src, float* dst, size_t n, void* stream);

// Stream-ordered device memory for the partial sums (cudaMallocAsync / cudaFreeAsync).
void* stream_alloc(size_t bytes, void* stream);
void stream_free(void* p, void* stream) noexcept;

}  // namespace ferry::gpu_adamw
