// The tensor-core backward of flash attention (FlashAttention-2's schedule) for head_dim 64 and 128.
//
// One block per (kv head, tile of Bc = 16 * Warps keys); warp w owns keys 16w..16w+15 and keeps
// their dK and dV (16 x D fp32 each) in registers for the whole block. The block walks, for every
// query head of the GQA group, the query tiles (Bq queries) that can see its keys -- from the
// tile's first key to the end of its last key's document -- with Q, dO, lse and delta of tile
// i+1 loading (cp.async) while tile i computes. Per step, with the keys as rows (transposed, so
// that each warp's rows are its own keys):
//   S^T = K Q^T, dP^T = V dO^T                      (mma, this warp's 16 keys x Bq queries)
//   P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta)   (masked entries are 0)
//   dV += P^T dO, dK += dS^T Q                      (P^T, dS^T re-used from registers as A fragments)
//   dQ[tile] += dS K                                (dS^T through shared memory; warps split dQ into
//                                                    16 x DqCols pieces; fp32 atomics into the
//                                                    workspace, float4 ones on sm_90)
// and at the end dK = scale dK, dV written as bf16. delta = rowsum(dO * O) comes precomputed; dq
// is scaled and converted to bf16 afterwards (convert_dq_kernel).
//
// Shared memory (bf16 rows padded by 8 elements, as in the forward): K, V (Bc x (D+8)) for the
// whole block; Q, dO (Bq x (D+8)) twice (double buffer); dS^T (Bc x (Bq+8)); lse, delta and
// doc_start of the query tile (Bq each) twice.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_tile.cuh"

namespace ferry::flash {

// head_dim D, Warps warps (Bc = 16 Warps keys), Bq queries per step, dQ pieces DqCols wide,
// MinBlocks for __launch_bounds__.
template <int D_, int Warps_, int Bq_, int DqCols_, int MinBlocks_>
struct BackwardTile {
  static constexpr int D = D_, Warps = Warps_, Bc = 16 * Warps_, Bq = Bq_, MinBlocks = MinBlocks_;
  static constexpr int Threads = 32 * Warps;
  static constexpr int LD = D + 8;    // K, V, Q, dO rows (bf16)
  static constexpr int LDS = Bq + 8;  // dS^T rows (bf16)
  // Offsets in bf16 elements, then the fp32/int32 per-query vectors.
  static constexpr int kK = 0, kV = Bc * LD, kQ = 2 * Bc * LD, kDo = kQ + 2 * Bq * LD,
                       kDs = kDo + 2 * Bq * LD;
  static constexpr int kBf16Elems = kDs + Bc * LDS;
  static constexpr size_t kVecOffset =
      sizeof(bf16) * kBf16Elems;  // 16-byte aligned: all counts are multiples of 8
  static constexpr size_t kSmemBytes = kVecOffset + 3 * 2 * Bq * 4;
  // dQ is computed in pieces of 16 queries x kDqCols columns, ideally one per warp.
  static constexpr int kDqCols = DqCols_;
  static constexpr int kDqPieces = (Bq / 16) * (D / kDqCols);
  static_assert(D % kDqCols == 0 && kDqCols % 16 == 0 && Bq % 16 == 0 && Bq <= Threads, "tile shape");
  static_assert(kBf16Elems % 8 == 0, "vector area alignment");
};

template <class Tile>
__global__ void __launch_bounds__(Tile::Threads, Tile::MinBlocks)
    backward_kernel(const FlashAttentionBackwardParams bp, const float* __restrict__ delta, float* dq_accum) {
  constexpr int D = Tile::D, Bc = Tile::Bc, Bq = Tile::Bq, LD = Tile::LD, LDS = Tile::LDS;
  constexpr int kQTiles = Bq / 8;  // n-tiles of S^T per warp
  constexpr int kDTiles = D / 8;   // n-tiles of dK, dV per warp
  const FlashAttentionParams& p = bp.fwd;

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* const s_bf16 = reinterpret_cast<bf16*>(smem);
  const bf16* const s_k = s_bf16 + Tile::kK;
  const bf16* const s_v = s_bf16 + Tile::kV;
  bf16* const s_ds = s_bf16 + Tile::kDs;
  float* const s_lse = reinterpret_cast<float*>(smem + Tile::kVecOffset);  // [2][Bq]
  float* const s_delta = s_lse + 2 * Bq;                                   // [2][Bq]
  int* const s_doc = reinterpret_cast<int*>(s_delta + 2 * Bq);             // [2][Bq]

  const int T = static_cast<int>(p.tokens);
  const int kvh = blockIdx.x;
  const int j0 = blockIdx.y * Bc;
  const int group = p.q_heads / p.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(p.q_heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * D;

  // Queries that see some key of [j0, j_last]: t >= j0 with doc_start[t] <= j_last. doc_start is
  // nondecreasing, so they end at the first t > j_last whose document starts after j_last.
  const int j_last = min(j0 + Bc, T) - 1;
  int lo = j_last + 1, hi = T;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (p.doc_start[mid] > j_last)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int qt_begin = j0 / Bq, qt_count = (lo - 1) / Bq + 1 - qt_begin;
  const int steps = group * qt_count;  // (query head, query tile) pairs

  load_rows<D, LD, Bc, Tile::Threads>(s_bf16 + Tile::kK, static_cast<const bf16*>(p.k) + kvh * D, kv_stride,
                                      j0, T);
  load_rows<D, LD, Bc, Tile::Threads>(s_bf16 + Tile::kV, static_cast<const bf16*>(p.v) + kvh * D, kv_stride,
                                      j0, T);
  auto load_step = [&](int stage, int step) {
    const int h = kvh * group + step / qt_count;
    const int t0 = (qt_begin + step % qt_count) * Bq;
    load_rows<D, LD, Bq, Tile::Threads>(s_bf16 + Tile::kQ + stage * Bq * LD,
                                        static_cast<const bf16*>(p.q) + static_cast<int64_t>(h) * D, q_stride,
                                        t0, T);
    load_rows<D, LD, Bq, Tile::Threads>(s_bf16 + Tile::kDo + stage * Bq * LD,
                                        static_cast<const bf16*>(bp.dout) + static_cast<int64_t>(h) * D,
                                        out_row_elements(p), t0, T);
    if (threadIdx.x < Bq) {
      const int t = t0 + threadIdx.x;
      const bool valid = t < T;
      const int64_t i = static_cast<int64_t>(h) * T + (valid ? t : 0);
      cp_async_4(s_lse + stage * Bq + threadIdx.x, p.lse + i, valid);
      cp_async_4(s_delta + stage * Bq + threadIdx.x, delta + i, valid);
      cp_async_4(s_doc + stage * Bq + threadIdx.x, p.doc_start + (valid ? t : 0), valid);
    }
  };
  load_step(0, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  float dk[kDTiles][4], dv[kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;
  const float scale_log2 = p.scale * kLog2e;
  // Row offset and column offset of this lane's ldmatrix row address, for the two orders of the
  // four 8x8 matrices used below (see flash_attention_ptx.cuh): "a" = A fragments or transposed B
  // (matrix i at rows (i & 1) * 8, columns (i >> 1) * 8), "b" = B from row-major n x k (rows
  // (i >> 1) * 8, columns (i & 1) * 8).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const int key[2] = {j0 + 16 * warp + g, j0 + 16 * warp + g + 8};

  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (step + 1 < steps) load_step(stage ^ 1, step + 1);
    cp_async_commit();
    const int h = kvh * group + step / qt_count;
    const int t0 = (qt_begin + step % qt_count) * Bq;
    const bf16* const s_q = s_bf16 + Tile::kQ + stage * Bq * LD;
    const bf16* const s_do = s_bf16 + Tile::kDo + stage * Bq * LD;
    const float* const lse = s_lse + stage * Bq;
    const float* const dlt = s_delta + stage * Bq;
    const int* const doc = s_doc + stage * Bq;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys.
    float st[kQTiles][4], dpt[kQTiles][4];
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t ka[4], va[4];
      ldmatrix_x4(ka, s_k + (16 * warp + a_row) * LD + ks * 16 + a_col);
      ldmatrix_x4(va, s_v + (16 * warp + a_row) * LD + ks * 16 + a_col);
#pragma unroll
      for (int np = 0; np < Bq / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, s_q + (np * 16 + b_row) * LD + ks * 16 + b_col);
        mma_16816(st[2 * np], ka, b[0], b[1]);
        mma_16816(st[2 * np + 1], ka, b[2], b[3]);
        ldmatrix_x4(b, s_do + (np * 16 + b_row) * LD + ks * 16 + b_col);
        mma_16816(dpt[2 * np], va, b[0], b[1]);
        mma_16816(dpt[2 * np + 1], va, b[2], b[3]);
      }
    }
    // P^T into st, dS^T into dpt. Element e of n-tile nt: key row key[e >> 1], query t0 + ql.
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * tq + (e & 1);
        const int t = t0 + ql;
        const int j = key[e >> 1];
        const bool visible = t < T && j >= doc[ql] && j <= t;
        const float pr = visible ? exp2_approx(fmaf(st[nt][e], scale_log2, -lse[ql] * kLog2e)) : 0.0f;
        st[nt][e] = pr;
        dpt[nt][e] = pr * (dpt[nt][e] - dlt[ql]);
      }
    }
    // dV += P^T dO and dK += dS^T Q: k runs over the tile's queries; dO and Q (queries x d) are B
    // as stored, read transposed.
#pragma unroll
    for (int kk = 0; kk < Bq / 16; ++kk) {
      const uint32_t pa[4] = {
          pack_bf16(st[2 * kk][0], st[2 * kk][1]), pack_bf16(st[2 * kk][2], st[2 * kk][3]),
          pack_bf16(st[2 * kk + 1][0], st[2 * kk + 1][1]), pack_bf16(st[2 * kk + 1][2], st[2 * kk + 1][3])};
      const uint32_t da[4] = {pack_bf16(dpt[2 * kk][0], dpt[2 * kk][1]),
                              pack_bf16(dpt[2 * kk][2], dpt[2 * kk][3]),
                              pack_bf16(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                              pack_bf16(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, s_do + (kk * 16 + a_row) * LD + dp * 16 + a_col);
        mma_16816(dv[2 * dp], pa, b[0], b[1]);
        mma_16816(dv[2 * dp + 1], pa, b[2], b[3]);
        ldmatrix_x4_trans(b, s_q + (kk * 16 + a_row) * LD + dp * 16 + a_col);
        mma_16816(dk[2 * dp], da, b[0], b[1]);
        mma_16816(dk[2 * dp + 1], da, b[2], b[3]);
      }
    }
    // dS^T (bf16, the same rounding the dK product used) for the block's dQ product.
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(s_ds + (16 * warp + g + 8 * r) * LDS + nt * 8 + 2 * tq) =
            pack_bf16(dpt[nt][2 * r], dpt[nt][2 * r + 1]);
    __syncthreads();

    // dQ (Bq x D) += dS K over the block's Bc keys. dS as A comes from dS^T read transposed
    // (matrix i at keys (i >> 1) * 8, queries (i & 1) * 8); K (keys x d) is B read transposed.
    for (int piece = warp; piece < Tile::kDqPieces; piece += Tile::Warps) {
      const int mq = piece % (Bq / 16), dc = piece / (Bq / 16);
      float acc[Tile::kDqCols / 8][4];
#pragma unroll
      for (int nt = 0; nt < Tile::kDqCols / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < Bc / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, s_ds + (ks * 16 + b_row) * LDS + mq * 16 + b_col);
#pragma unroll
        for (int dp = 0; dp < Tile::kDqCols / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, s_k + (ks * 16 + a_row) * LD + dc * Tile::kDqCols + dp * 16 + a_col);
          mma_16816(acc[2 * dp], a, b[0], b[1]);
          mma_16816(acc[2 * dp + 1], a, b[2], b[3]);
        }
      }
#if FERRY_FLASH_FLOAT4_ATOMICS
      // Lanes 2i and 2i+1 of a quad swap halves so that each holds four consecutive columns of one
      // row: the even lane row g, columns 2tq..2tq+3; the odd lane row g+8, columns 2tq-2..2tq+1.
      const bool odd = tq & 1;
      const int t = t0 + mq * 16 + g + (odd ? 8 : 0);
      float* const dst =
          dq_accum + (static_cast<int64_t>(t) * p.q_heads + h) * D + dc * Tile::kDqCols + 2 * (tq & ~1);
#pragma unroll
      for (int nt = 0; nt < Tile::kDqCols / 8; ++nt) {
        const float s0 = odd ? acc[nt][0] : acc[nt][2], s1 = odd ? acc[nt][1] : acc[nt][3];
        const float r0 = __shfl_xor_sync(kFullMask, s0, 1), r1 = __shfl_xor_sync(kFullMask, s1, 1);
        const float4 four =
            odd ? make_float4(r0, r1, acc[nt][2], acc[nt][3]) : make_float4(acc[nt][0], acc[nt][1], r0, r1);
        if (t < T) atomicAdd(reinterpret_cast<float4*>(dst + nt * 8), four);
      }
#else
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = t0 + mq * 16 + g + 8 * r;
        if (t >= T) continue;
        float* const dst =
            dq_accum + (static_cast<int64_t>(t) * p.q_heads + h) * D + dc * Tile::kDqCols + 2 * tq;
#pragma unroll
        for (int nt = 0; nt < Tile::kDqCols / 8; ++nt) {
          atomicAdd(dst + nt * 8, acc[nt][2 * r]);
          atomicAdd(dst + nt * 8 + 1, acc[nt][2 * r + 1]);
        }
      }
#endif
    }
    cp_async_wait_all();
    __syncthreads();  // step+1's tiles are in; s_ds and this stage are free
  }

  bf16* const dk_out = static_cast<bf16*>(bp.dk) + kvh * D;
  bf16* const dv_out = static_cast<bf16*>(bp.dv) + kvh * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= T) continue;
    const int64_t row = key[r] * kv_stride;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      *reinterpret_cast<uint32_t*>(dk_out + row + dt * 8 + 2 * tq) =
          pack_bf16(p.scale * dk[dt][2 * r], p.scale * dk[dt][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_out + row + dt * 8 + 2 * tq) =
          pack_bf16(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

}  // namespace ferry::flash
