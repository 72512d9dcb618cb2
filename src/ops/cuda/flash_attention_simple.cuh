// The simple flash attention kernels: any head_dim up to 256, fp32 arithmetic throughout (bf16
// only in memory), no tensor cores, no shared tiles. They serve the head dims the tensor-core
// path does not (tests and tiny models use 8, 16, 32) and are the GPU-side oracle of that path.
//
// One warp per output row. A row's D values are spread over the lanes (dimension d on lane
// d % 32, up to 8 per lane); the inner products of the row with other rows are computed 32 at a
// time, one per lane, against the row kept in shared memory, and the weighted sums of rows then
// broadcast each lane's weight in turn. The softmax is online across chunks of 32 keys, with the
// natural exponential. Every sum is in a fixed order, so results are deterministic.
//
// Also here: the backward's bookkeeping kernels that both paths use (delta, dq conversion).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/flash_attention.h"

namespace ferry::flash {

using bf16 = __nv_bfloat16;
constexpr int kMaxD = 256;
constexpr int kPerLane = kMaxD / 32;
constexpr int kSimpleWarps = 4;  // per block
constexpr unsigned kSimpleMask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kSimpleMask, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kSimpleMask, x, o);
  return x;
}

// row (D floats in shared memory) . other (D bf16 in global memory), summed in order of d.
__device__ __forceinline__ float dot(const float* row, const bf16* other, int D) {
  float s = 0.0f;
  for (int d = 0; d < D; ++d) s += row[d] * __bfloat162float(other[d]);
  return s;
}

// This warp's row (D bf16 at src) into shared memory as fp32.
__device__ __forceinline__ void stage_row(float* dst, const bf16* src, int D, int lane) {
  for (int d = lane; d < D; d += 32) dst[d] = __bfloat162float(src[d]);
  __syncwarp();
}

// acc[i] (dimension lane + 32 i) += w * x[lane + 32 i] for the row x (D bf16).
__device__ __forceinline__ void add_row(float (&acc)[kPerLane], float w, const bf16* x, int D, int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) acc[i] += w * __bfloat162float(x[d]);
  }
}

// One warp per (query t, head h): out row and lse.
__global__ void __launch_bounds__(32 * kSimpleWarps) forward_simple_kernel(const FlashAttentionParams p) {
  extern __shared__ float s_rows[];  // [kSimpleWarps][D]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kSimpleWarps + warp;
  if (item >= p.tokens * p.q_heads) return;  // whole warps leave together
  const int T = static_cast<int>(p.tokens), D = p.head_dim, Hq = p.q_heads;
  float* const s_q = s_rows + warp * D;
  const int t = static_cast<int>(item / Hq), h = static_cast<int>(item % Hq);
  const int kvh = h / (Hq / p.kv_heads);
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * D;
  const bf16* const k = static_cast<const bf16*>(p.k) + static_cast<int64_t>(kvh) * D;
  const bf16* const v = static_cast<const bf16*>(p.v) + static_cast<int64_t>(kvh) * D;
  stage_row(s_q, static_cast<const bf16*>(p.q) + item * D, D, lane);

  float acc[kPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  for (int jb = p.doc_start[t]; jb <= t; jb += 32) {
    const int j = jb + lane;
    // Every chunk holds key jb <= t, so its max is finite.
    const float s = j <= t ? p.scale * dot(s_q, k + j * kv_stride, D) : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    const float pr = expf(s - m_new);
    l = l * alpha + warp_sum(pr);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= alpha;
    m = m_new;
    const int n = min(32, t - jb + 1);
    for (int jj = 0; jj < n; ++jj)
      add_row(acc, __shfl_sync(kSimpleMask, pr, jj), v + (jb + jj) * kv_stride, D, lane);
  }
  bf16* const out = static_cast<bf16*>(p.out) + t * out_row_elements(p) + static_cast<int64_t>(h) * D;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) out[d] = __float2bfloat16(acc[i] / l);
  }
  if (lane == 0) p.lse[static_cast<int64_t>(h) * T + t] = m + logf(l);
}

// One warp per (query t, head h): dq row = scale sum_j dS_j k_j, dS_j = P_j (dout.v_j - delta).
__global__ void __launch_bounds__(32 * kSimpleWarps)
    dq_simple_kernel(const FlashAttentionBackwardParams bp, const float* __restrict__ delta) {
  extern __shared__ float s_rows[];  // [2][kSimpleWarps][D]
  const FlashAttentionParams& p = bp.fwd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kSimpleWarps + warp;
  if (item >= p.tokens * p.q_heads) return;
  const int T = static_cast<int>(p.tokens), D = p.head_dim, Hq = p.q_heads;
  float* const s_q = s_rows + warp * D;
  float* const s_g = s_rows + (kSimpleWarps + warp) * D;
  const int t = static_cast<int>(item / Hq), h = static_cast<int>(item % Hq);
  const int kvh = h / (Hq / p.kv_heads);
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * D;
  const bf16* const k = static_cast<const bf16*>(p.k) + static_cast<int64_t>(kvh) * D;
  const bf16* const v = static_cast<const bf16*>(p.v) + static_cast<int64_t>(kvh) * D;
  stage_row(s_q, static_cast<const bf16*>(p.q) + item * D, D, lane);
  stage_row(s_g, static_cast<const bf16*>(bp.dout) + t * out_row_elements(p) + static_cast<int64_t>(h) * D, D,
            lane);
  const float lse = p.lse[static_cast<int64_t>(h) * T + t];
  const float dl = delta[static_cast<int64_t>(h) * T + t];

  float acc[kPerLane] = {};
  for (int jb = p.doc_start[t]; jb <= t; jb += 32) {
    const int j = jb + lane;
    float ds = 0.0f;
    if (j <= t) {
      const float pr = expf(p.scale * dot(s_q, k + j * kv_stride, D) - lse);
      ds = pr * (dot(s_g, v + j * kv_stride, D) - dl);
    }
    const int n = min(32, t - jb + 1);
    for (int jj = 0; jj < n; ++jj)
      add_row(acc, __shfl_sync(kSimpleMask, ds, jj), k + (jb + jj) * kv_stride, D, lane);
  }
  bf16* const dq = static_cast<bf16*>(bp.dq) + item * D;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) dq[d] = __float2bfloat16(p.scale * acc[i]);
  }
}

// One warp per (key j, kv head): over the group's query heads and the queries t >= j of j's
// document, dv row = sum_t P_t dout_t and dk row = scale sum_t dS_t q_t.
__global__ void __launch_bounds__(32 * kSimpleWarps)
    dkdv_simple_kernel(const FlashAttentionBackwardParams bp, const float* __restrict__ delta) {
  extern __shared__ float s_rows[];  // [2][kSimpleWarps][D]
  const FlashAttentionParams& p = bp.fwd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kSimpleWarps + warp;
  if (item >= p.tokens * p.kv_heads) return;
  const int T = static_cast<int>(p.tokens), D = p.head_dim, Hq = p.q_heads;
  float* const s_k = s_rows + warp * D;
  float* const s_v = s_rows + (kSimpleWarps + warp) * D;
  const int j = static_cast<int>(item / p.kv_heads), kvh = static_cast<int>(item % p.kv_heads);
  const int group = Hq / p.kv_heads;
  const int64_t q_stride = static_cast<int64_t>(Hq) * D, g_stride = out_row_elements(p);
  stage_row(s_k, static_cast<const bf16*>(p.k) + item * D, D, lane);
  stage_row(s_v, static_cast<const bf16*>(p.v) + item * D, D, lane);

  float kacc[kPerLane] = {}, vacc[kPerLane] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const bf16* const q = static_cast<const bf16*>(p.q) + static_cast<int64_t>(h) * D;
    const bf16* const g = static_cast<const bf16*>(bp.dout) + static_cast<int64_t>(h) * D;
    // The queries that see key j are t in [j, end of j's document): a prefix of t >= j, since
    // documents are contiguous. Stop at the first chunk with none.
    for (int tb = j; tb < T; tb += 32) {
      const int t = tb + lane;
      const bool sees = t < T && p.doc_start[t] <= j;
      const unsigned seen = __ballot_sync(kSimpleMask, sees);
      if (seen == 0) break;
      float pr = 0.0f, ds = 0.0f;
      if (sees) {
        const int64_t hi = static_cast<int64_t>(h) * T + t;
        pr = expf(p.scale * dot(s_k, q + t * q_stride, D) - p.lse[hi]);
        ds = pr * (dot(s_v, g + t * g_stride, D) - delta[hi]);
      }
      const int n = 32 - __clz(seen);  // lanes past the last one that sees j contribute 0
      for (int i = 0; i < n; ++i) {
        add_row(vacc, __shfl_sync(kSimpleMask, pr, i), g + (tb + i) * g_stride, D, lane);
        add_row(kacc, __shfl_sync(kSimpleMask, ds, i), q + (tb + i) * q_stride, D, lane);
      }
    }
  }
  bf16* const dk = static_cast<bf16*>(bp.dk) + item * D;
  bf16* const dv = static_cast<bf16*>(bp.dv) + item * D;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) {
      dk[d] = __float2bfloat16(p.scale * kacc[i]);
      dv[d] = __float2bfloat16(vacc[i]);
    }
  }
}

// delta (Hq, T) = rowsum over d of dout * out, one warp per row (t, h), fp32. out's and dout's
// token rows are `out_stride` elements apart.
__global__ void delta_kernel(const bf16* __restrict__ out, const bf16* __restrict__ dout,
                             float* __restrict__ delta, int64_t tokens, int q_heads, int head_dim,
                             int64_t out_stride) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= tokens * q_heads) return;
  const int64_t at = (row / q_heads) * out_stride + (row % q_heads) * head_dim;
  const bf16* const o = out + at;
  const bf16* const g = dout + at;
  float sum = 0.0f;
  for (int d = lane; d < head_dim; d += 32) sum += __bfloat162float(o[d]) * __bfloat162float(g[d]);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kSimpleMask, sum, offset);
  if (lane == 0) {
    const int64_t t = row / q_heads, h = row % q_heads;
    delta[h * tokens + t] = sum;
  }
}

// dq = bf16(scale * acc), four elements per thread (count is a multiple of 4: head_dim is 64 or 128).
__global__ void convert_dq_kernel(const float4* __restrict__ acc, uint2* __restrict__ dq, float scale,
                                  int64_t quads) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < quads;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 a = acc[i];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(scale * a.x, scale * a.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(scale * a.z, scale * a.w);
    dq[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
}

}  // namespace ferry::flash
