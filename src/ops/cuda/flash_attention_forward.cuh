// The tensor-core forward of flash attention (FlashAttention-2's schedule) for head_dim 64 and 128.
//
// One block per (query head h, tile of Br = 16 * Warps queries); warp w owns query rows
// 16w..16w+15 of the tile and keeps, per row, the running max m, the running sum l and the
// unnormalised output O (16 x D, fp32) in registers; its Q rows stay in registers as mma A
// fragments. The block walks the key tiles (Bc keys) its queries can see, K and V double-buffered
// through shared memory with cp.async (tile i+1 loads while tile i computes):
//   S = Q K^T (mma) -> scale, mask -> m' = max(m, rowmax S), P = exp(S - m'), l = l e^(m-m') + rowsum P,
//   O = O e^(m-m') + P V (P re-used from the accumulator registers as bf16 A fragments).
// Exponentials are base 2 with scale * log2(e) folded in; lse = (m + log2 l) ln 2.
//
// Skipping: the key tiles are those from min doc_start of the block's queries to its last query
// (the causal upper triangle and the keys before every query's document are never loaded); inside
// them a warp skips a tile none of its rows can see, and masks elementwise only a tile that is not
// entirely visible to all its rows.
//
// Shared memory (bf16, rows padded to D + 8 so that the 8 row addresses of an ldmatrix fall in
// distinct 16-byte bank groups): [K0][V0][K1][V1], each Bc x (D + 8); the Q tile is loaded over
// [K1][V1] and moved to registers before stage 1 is first written; the output is staged over
// [K0][V0] at the end to write whole 16-byte row pieces. Then one int per warp.
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cmath>

#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_tile.cuh"

namespace ferry::flash {

// head_dim D, Warps warps (Br = 16 Warps query rows), Bc keys per step, MinBlocks for __launch_bounds__.
template <int D_, int Warps_, int Bc_, int MinBlocks_>
struct ForwardTile {
  static constexpr int D = D_, Warps = Warps_, Br = 16 * Warps_, Bc = Bc_, MinBlocks = MinBlocks_;
  static constexpr int Threads = 32 * Warps;
  static constexpr int LD = D + 8;            // shared-memory row stride in bf16
  static constexpr int kStage = 2 * Bc * LD;  // one K tile and one V tile
  static constexpr int kSmemElems = (2 * kStage > kStage + Br * LD) ? 2 * kStage : kStage + Br * LD;
  // Then Warps ints: each warp's smallest doc_start.
  static constexpr size_t kSmemBytes = sizeof(bf16) * kSmemElems + sizeof(int) * Warps;
  static_assert(D % 16 == 0 && Bc % 16 == 0, "mma tiles are 16 wide");
  static_assert(Br * LD <= kSmemElems, "the output staging area must fit");
};

template <class Tile>
__global__ void __launch_bounds__(Tile::Threads, Tile::MinBlocks)
    forward_kernel(const FlashAttentionParams p) {
  constexpr int D = Tile::D, Br = Tile::Br, Bc = Tile::Bc, LD = Tile::LD, Warps = Tile::Warps;
  constexpr int kScoreTiles = Bc / 8;  // n-tiles of S per warp
  constexpr int kOutTiles = D / 8;     // n-tiles of O per warp
  constexpr int kSteps = D / 16;       // k-steps of Q K^T

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const s_kv = reinterpret_cast<bf16*>(smem);
  bf16* const s_q = s_kv + Tile::kStage;
  int* const s_doc_min = reinterpret_cast<int*>(s_kv + Tile::kSmemElems);  // [Warps]

  const int T = static_cast<int>(p.tokens);
  const int h = blockIdx.x;
  // Later query tiles see more keys in a causal sequence: launch them first.
  const int q0 = (gridDim.y - 1 - blockIdx.y) * Br;
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(p.q_heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * D;
  const bf16* const q = static_cast<const bf16*>(p.q) + static_cast<int64_t>(h) * D;
  const bf16* const k = static_cast<const bf16*>(p.k) + static_cast<int64_t>(kvh) * D;
  const bf16* const v = static_cast<const bf16*>(p.v) + static_cast<int64_t>(kvh) * D;

  load_rows<D, LD, Br, Tile::Threads>(s_q, q, q_stride, q0, T);

  // This warp's rows w0..w0+15: lane i < 16 reads row w0 + i's doc_start (lanes 16..31 repeat).
  // Rows at or past T get doc_start INT_MAX, which masks every key for them.
  const int w0 = q0 + 16 * warp;
  const int w_last = min(w0 + 15, T - 1);  // last real row (< w0 when the warp has none)
  const int lane_row = w0 + (lane & 15);
  const int lane_doc = lane_row < T ? p.doc_start[lane_row] : INT_MAX;
  const int w_doc_min = __reduce_min_sync(kFullMask, lane_doc);
  const int w_doc_max = __reduce_max_sync(kFullMask, lane_row < T ? lane_doc : -1);
  if (lane == 0) s_doc_min[warp] = w_doc_min;
  // The two rows whose accumulators this thread holds (c[0..1] and c[2..3] of every tile).
  const int row[2] = {w0 + g, w0 + g + 8};
  const int doc[2] = {__shfl_sync(kFullMask, lane_doc, g), __shfl_sync(kFullMask, lane_doc, g + 8)};
  __syncthreads();

  int block_doc_min = INT_MAX;
#pragma unroll
  for (int w = 0; w < Warps; ++w) block_doc_min = min(block_doc_min, s_doc_min[w]);
  const int kt_begin = block_doc_min / Bc;
  const int kt_end = (min(q0 + Br, T) - 1) / Bc + 1;

  auto load_kv = [&](int stage, int kt) {
    bf16* const s_k = s_kv + stage * Tile::kStage;
    load_rows<D, LD, Bc, Tile::Threads>(s_k, k, kv_stride, kt * Bc, T);
    load_rows<D, LD, Bc, Tile::Threads>(s_k + Bc * LD, v, kv_stride, kt * Bc, T);
  };
  load_kv(0, kt_begin);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // Q as A fragments: matrix i of ldmatrix.x4 = rows (i & 1) * 8.., columns (i >> 1) * 8.. of a 16x16 step.
  uint32_t qf[kSteps][4];
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks)
    ldmatrix_x4(qf[ks],
                s_q + (16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + ks * 16 + (lane >> 4) * 8);
  __syncthreads();  // s_q is stage 1's space from here on

  float o[kOutTiles][4];
#pragma unroll
  for (int dt = 0; dt < kOutTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of scaled scores (log2 units)
  float l[2] = {0.0f, 0.0f};            // this thread's share of the running sum (quad-reduced at the end)
  const float scale_log2 = p.scale * kLog2e;

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int stage = (kt - kt_begin) & 1;
    if (kt + 1 < kt_end) load_kv(stage ^ 1, kt + 1);
    cp_async_commit();
    const bf16* const s_k = s_kv + stage * Tile::kStage;
    const bf16* const s_v = s_k + Bc * LD;
    const int j0 = kt * Bc;
    const bool visible = j0 <= w_last && j0 + Bc - 1 >= w_doc_min;  // some row of the warp sees some key
    if (visible) {
      float s[kScoreTiles][4];
#pragma unroll
      for (int nt = 0; nt < kScoreTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        // S = Q K^T. B = K^T, so B fragments are K rows as stored: matrix i = keys (i >> 1) * 8..,
        // d (i & 1) * 8.. -> registers {0,1} for keys 0..7 and {2,3} for keys 8..15.
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
        for (int np = 0; np < kScoreTiles / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b,
                      s_k + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + ks * 16 + ((lane >> 3) & 1) * 8);
          mma_16816(s[2 * np], qf[ks], b[0], b[1]);
          mma_16816(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }
      const bool all_visible = j0 + Bc - 1 <= w0 && j0 >= w_doc_max;
#pragma unroll
      for (int nt = 0; nt < kScoreTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] *= scale_log2;
          if (!all_visible) {
            const int j = j0 + nt * 8 + 2 * tq + (e & 1);
            const int r = e >> 1;
            if (j < doc[r] || j > row[r]) s[nt][e] = -INFINITY;
          }
        }
      }
      // Online softmax, row by row (a row's Bc scores are spread over the 4 lanes of a quad).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float m_new = fmaxf(m[r], mx);
        // A row with no visible key yet keeps m = -inf; subtracting 0 then gives 2^-inf = 0, not NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = exp2_approx(m[r] - m_use);
        m[r] = m_new;
        l[r] *= alpha;
#pragma unroll
        for (int dt = 0; dt < kOutTiles; ++dt) {
          o[dt][2 * r] *= alpha;
          o[dt][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < kScoreTiles; ++nt) {
          s[nt][2 * r] = exp2_approx(s[nt][2 * r] - m_use);
          s[nt][2 * r + 1] = exp2_approx(s[nt][2 * r + 1] - m_use);
          l[r] += s[nt][2 * r] + s[nt][2 * r + 1];
        }
      }
      // O += P V. P's accumulator tiles 2kk and 2kk+1 are exactly the A fragment of keys
      // 16kk..16kk+15; V (keys x d) is B as stored, read transposed: matrix i = keys (i & 1) * 8..,
      // d (i >> 1) * 8.. -> registers {0,1} for d 0..7 and {2,3} for d 8..15.
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        const uint32_t a[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                               pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, s_v + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 + (lane >> 4) * 8);
          mma_16816(o[2 * dp], a, b[0], b[1]);
          mma_16816(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();  // tile kt+1 is in; everyone is done with stage `stage`
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullMask, l[r], 1);
    l[r] += __shfl_xor_sync(kFullMask, l[r], 2);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    if (tq == 0 && row[r] < T)
      p.lse[static_cast<int64_t>(h) * T + row[r]] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
  }

  // Stage this warp's 16 output rows in shared memory, then write whole 16-byte pieces of them.
  bf16* const s_o = s_kv + 16 * warp * LD;
#pragma unroll
  for (int dt = 0; dt < kOutTiles; ++dt) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<uint32_t*>(s_o + (g + 8 * r) * LD + dt * 8 + 2 * tq) =
          pack_bf16(o[dt][2 * r] * inv[r], o[dt][2 * r + 1] * inv[r]);
  }
  __syncwarp();
  bf16* const out = static_cast<bf16*>(p.out) + static_cast<int64_t>(h) * D;
  const int64_t out_stride = out_row_elements(p);
#pragma unroll
  for (int it = 0; it < 16 * (D / 8) / 32; ++it) {
    const int i = lane + 32 * it;
    const int rr = i / (D / 8), c = i % (D / 8);
    const int t = w0 + rr;
    if (t < T)
      *reinterpret_cast<uint4*>(out + t * out_stride + c * 8) =
          *reinterpret_cast<const uint4*>(s_o + rr * LD + c * 8);
  }
}

}  // namespace ferry::flash
