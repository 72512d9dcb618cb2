// The GPU AdamW's kernels. Every fp32 operation is an explicitly rounded intrinsic (__fmul_rn,
// __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn), which nvcc never contracts into an FMA, and the
// reference's two std::fma are fmaf: the same operations, in the same order, as adamw_step.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/check.h"
#include "core/cuda_check.h"
#include "optim/cuda/gpu_adamw_kernels.h"

namespace ferry::gpu_adamw {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_grad(const void* grad, bool bf16, size_t i) {
  if (bf16)
    return __uint_as_float(static_cast<unsigned int>(static_cast<const unsigned short*>(grad)[i]) << 16);
  return static_cast<const float*>(grad)[i];
}

// adamw.cpp's update_loop body for one element.
template <bool kLerpSmall>
__device__ __forceinline__ void update_one(const Scalars& s, float decay_factor, float scale, float& param,
                                           float& m, float& v, float grad) {
  const float lerp_coef = kLerpSmall ? s.lerp_weight : __fsub_rn(s.lerp_weight, 1.0f);
  const float g = __fmul_rn(grad, scale);
  float p = __fmul_rn(param, decay_factor);
  const float mi = m;
  const float m_new = fmaf(lerp_coef, __fsub_rn(g, mi), kLerpSmall ? mi : g);
  const float vi = fmaf(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(v, s.beta2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, m_new), denom));
  m = m_new;
  v = vi;
  param = p;
}

// Four elements per thread (16-byte accesses when `vec`), a grid-stride loop.
template <bool kLerpSmall>
__global__ void __launch_bounds__(kThreads) update_kernel(UpdateArgs a, Scalars s, bool vec) {
  const float scale = a.grad_scale != nullptr ? *a.grad_scale : 1.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads * 4;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) * 4; i < a.count; i += stride) {
    if (vec && i + 4 <= a.count) {
      float4 p = *reinterpret_cast<const float4*>(a.master + i);
      float4 m = *reinterpret_cast<const float4*>(a.m + i);
      float4 v = *reinterpret_cast<const float4*>(a.v + i);
      float g[4];
      if (a.grad_bf16) {
        const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(a.grad) + i);
        g[0] = __uint_as_float(raw.x << 16);
        g[1] = __uint_as_float(raw.x & 0xffff0000u);
        g[2] = __uint_as_float(raw.y << 16);
        g[3] = __uint_as_float(raw.y & 0xffff0000u);
      } else {
        const float4 gv = *reinterpret_cast<const float4*>(static_cast<const float*>(a.grad) + i);
        g[0] = gv.x;
        g[1] = gv.y;
        g[2] = gv.z;
        g[3] = gv.w;
      }
      update_one<kLerpSmall>(s, a.decay_factor, scale, p.x, m.x, v.x, g[0]);
      update_one<kLerpSmall>(s, a.decay_factor, scale, p.y, m.y, v.y, g[1]);
      update_one<kLerpSmall>(s, a.decay_factor, scale, p.z, m.z, v.z, g[2]);
      update_one<kLerpSmall>(s, a.decay_factor, scale, p.w, m.w, v.w, g[3]);
      *reinterpret_cast<float4*>(a.master + i) = p;
      *reinterpret_cast<float4*>(a.m + i) = m;
      *reinterpret_cast<float4*>(a.v + i) = v;
      if (a.bf16_out != nullptr) {
        const unsigned int lo =
            __bfloat16_as_ushort(__float2bfloat16_rn(p.x)) |
            (static_cast<unsigned int>(__bfloat16_as_ushort(__float2bfloat16_rn(p.y))) << 16);
        const unsigned int hi =
            __bfloat16_as_ushort(__float2bfloat16_rn(p.z)) |
            (static_cast<unsigned int>(__bfloat16_as_ushort(__float2bfloat16_rn(p.w))) << 16);
        *reinterpret_cast<uint2*>(a.bf16_out + i) = make_uint2(lo, hi);
      }
    } else {
      const size_t end = i + 4 < a.count ? i + 4 : a.count;
      for (size_t k = i; k < end; ++k) {
        float p = a.master[k], m = a.m[k], v = a.v[k];
        update_one<kLerpSmall>(s, a.decay_factor, scale, p, m, v, load_grad(a.grad, a.grad_bf16, k));
        a.master[k] = p;
        a.m[k] = m;
        a.v[k] = v;
        if (a.bf16_out != nullptr) a.bf16_out[k] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
      }
    }
  }
}

// One warp per chunk, in clip.cpp's sum_squares order: element i of the chunk goes to column
// i % kSumsqColumns (128) and lane j owns columns 4j..4j+3, so a row of 128 elements is one coalesced 4-wide
// load per lane; then (a0 + a1) + (a2 + a3) per lane and a butterfly that folds 16, 8, 4, 2, 1 lanes apart,
// which is the CPU's halving tree. Squares of floats are exact in double, and every add is an explicitly
// rounded __dadd_rn.
constexpr int kSumsqWarps = kThreads / 32;

__device__ __forceinline__ void load4(const void* grad, bool bf16, size_t i, bool vec, float x[4]) {
  if (vec) {
    if (bf16) {
      const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(grad) + i);
      x[0] = __uint_as_float(raw.x << 16);
      x[1] = __uint_as_float(raw.x & 0xffff0000u);
      x[2] = __uint_as_float(raw.y << 16);
      x[3] = __uint_as_float(raw.y & 0xffff0000u);
    } else {
      const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(grad) + i);
      x[0] = v.x;
      x[1] = v.y;
      x[2] = v.z;
      x[3] = v.w;
    }
  } else {
    for (int e = 0; e < 4; ++e) x[e] = load_grad(grad, bf16, i + e);
  }
}

__global__ void __launch_bounds__(kThreads)
    sumsq_partials_kernel(const void* grad, bool bf16, size_t n, double* partials) {
  const size_t c = static_cast<size_t>(blockIdx.x) * kSumsqWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const size_t begin = c * kSumsqChunk;
  if (begin >= n) return;  // the whole warp leaves together
  const size_t count = n - begin < kSumsqChunk ? n - begin : kSumsqChunk;
  const size_t full_rows = count / kSumsqColumns;
  const bool vec =
      bf16 ? (reinterpret_cast<uintptr_t>(grad) % 8 == 0) : (reinterpret_cast<uintptr_t>(grad) % 16 == 0);
  double a[4] = {0, 0, 0, 0};
  const size_t first = begin + 4 * lane;
#pragma unroll 8
  for (size_t r = 0; r < full_rows; ++r) {
    float x[4];
    load4(grad, bf16, first + r * kSumsqColumns, vec, x);
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] = __dadd_rn(a[e], __dmul_rn(x[e], x[e]));
  }
  const size_t tail = full_rows * kSumsqColumns;
  for (int e = 0; e < 4; ++e) {
    const size_t k = tail + 4 * lane + e;
    if (k < count) {
      const double x = load_grad(grad, bf16, begin + k);
      a[e] = __dadd_rn(a[e], __dmul_rn(x, x));
    }
  }
  double s = __dadd_rn(__dadd_rn(a[0], a[1]), __dadd_rn(a[2], a[3]));
#pragma unroll
  for (int half = 16; half > 0; half /= 2) s = __dadd_rn(s, __shfl_down_sync(0xffffffffu, s, half));
  if (lane == 0) partials[c] = s;
}

// core/dtype.h's f32_to_bf16, bit for bit (NaNs quieted the same way).
__device__ __forceinline__ unsigned int to_bf16_bits(float value) {
  const unsigned int bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x0040u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// Four elements per thread (16-byte loads, 8-byte stores when `vec`), a grid-stride loop.
__global__ void __launch_bounds__(kThreads)
    to_bf16_kernel(const float* master, uint16_t* out, size_t n, bool vec) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads * 4;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x) * 4; i < n; i += stride) {
    if (vec && i + 4 <= n) {
      const float4 p = *reinterpret_cast<const float4*>(master + i);
      const unsigned int lo = to_bf16_bits(p.x) | (to_bf16_bits(p.y) << 16);
      const unsigned int hi = to_bf16_bits(p.z) | (to_bf16_bits(p.w) << 16);
      *reinterpret_cast<uint2*>(out + i) = make_uint2(lo, hi);
    } else {
      for (size_t k = i; k < i + 4 && k < n; ++k) out[k] = static_cast<uint16_t>(to_bf16_bits(master[k]));
    }
  }
}

// The partials are added one after another in order, as the host adds them (clip.cpp): the sum's
// rounding depends on the order, so one thread adds. Read from global memory one by one, each add
// waited ~55 ns for its load (0.66 ms for a 3B layer's 12k partials); the block's threads bring
// each tile into shared memory in one coalesced pass instead, and the adding thread reads it there.
constexpr int kAccumulateThreads = 256;
constexpr int kAccumulateTile = 4096;  // doubles: 32 KiB of shared memory

__global__ void __launch_bounds__(kAccumulateThreads)
    accumulate_kernel(const double* partials, size_t count, double* sum) {
  __shared__ double tile[kAccumulateTile];
  double total = 0.0;
  if (threadIdx.x == 0) total = *sum;
  for (size_t begin = 0; begin < count; begin += kAccumulateTile) {
    const int n = static_cast<int>(count - begin < kAccumulateTile ? count - begin : kAccumulateTile);
    for (int k = static_cast<int>(threadIdx.x); k < n; k += kAccumulateThreads) tile[k] = partials[begin + k];
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll 8
      for (int k = 0; k < n; ++k) total = __dadd_rn(total, tile[k]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum = total;
}

// clip.cpp's clip_coefficient: norm rounded to float, (1 / (norm + 1e-6f)) * max_norm, clamped to
// 1 as std::min(coef, 1.0f) does (NaN stays NaN).
__global__ void clip_coefficient_kernel(const double* sum, bool clip, float max_norm_f, float shift,
                                        float* coefficient) {
  if (!clip) {
    *coefficient = 1.0f;
    return;
  }
  const float norm = __double2float_rn(__dsqrt_rn(*sum));
  const float coef = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(norm, shift)), max_norm_f);
  *coefficient = 1.0f < coef ? 1.0f : coef;
}

}  // namespace

void launch_update(const UpdateArgs& a, const Scalars& s, void* stream) {
  if (a.count == 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(a.master) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.m) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.grad) % (a.grad_bf16 ? 8 : 16) == 0 &&
                   (a.bf16_out == nullptr || reinterpret_cast<uintptr_t>(a.bf16_out) % 8 == 0);
  const size_t per_block = size_t{kThreads} * 4;
  size_t blocks = (a.count + per_block - 1) / per_block;
  if (blocks > 65536) blocks = 65536;
  auto st = static_cast<cudaStream_t>(stream);
  if (s.lerp_weight < 0.5f)
    update_kernel<true><<<static_cast<unsigned int>(blocks), kThreads, 0, st>>>(a, s, vec);
  else
    update_kernel<false><<<static_cast<unsigned int>(blocks), kThreads, 0, st>>>(a, s, vec);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_sumsq_partials(const void* grad, bool grad_bf16, size_t n, double* partials, void* stream) {
  if (n == 0) return;
  const size_t chunks = (n + kSumsqChunk - 1) / kSumsqChunk;
  const size_t blocks = (chunks + kSumsqWarps - 1) / kSumsqWarps;
  sumsq_partials_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(grad, grad_bf16, n, partials);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_accumulate(const double* partials, size_t count, double* sum, void* stream) {
  if (count == 0) return;
  accumulate_kernel<<<1, kAccumulateThreads, 0, static_cast<cudaStream_t>(stream)>>>(partials, count, sum);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_clip_coefficient(const double* sum, bool clip, float max_norm_f, float shift, float* coefficient,
                             void* stream) {
  clip_coefficient_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(sum, clip, max_norm_f, shift,
                                                                          coefficient);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_to_bf16(const float* master, uint16_t* out, size_t n, void* stream) {
  if (n == 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(master) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  const size_t per_block = size_t{kThreads} * 4;
  size_t blocks = (n + per_block - 1) / per_block;
  if (blocks > 65536) blocks = 65536;
  to_bf16_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      master, out, n, vec);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_copy_f32(const float* src, float* dst, size_t n, void* stream) {
  if (n == 0) return;
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                   static_cast<cudaStream_t>(stream)));
}

void* stream_alloc(size_t bytes, void* stream) {
  void* p = nullptr;
  FERRY_CUDA_CHECK(cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream)));
  return p;
}

void stream_free(void* p, void* stream) noexcept {
  if (p != nullptr) cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
}

}  // namespace ferry::gpu_adamw
