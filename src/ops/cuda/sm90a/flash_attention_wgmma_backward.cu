// The flash attention backward on Hopper's warpgroup products (wgmma), for head_dim 64 and 128:
// the schedule of the sm_80 backward (flash_attention_backward.cuh) with every product issued by
// a warpgroup at once.
//
// One block per (kv head, tile of Bc = 128 keys), two warpgroups of 64 keys each; each keeps its
// keys' dK and dV (64 x D fp32) in registers for the whole block. The block walks, for every query
// head of the GQA group, the query tiles (Bq = 64 queries) that can see its keys, Q, dO, lse,
// delta and doc_start of tile i+1 loading (cp.async) while tile i computes. Per step and
// warpgroup, keys as rows:
//   S^T = K Q^T, dP^T = V dO^T        wgmma, K, V, Q, dO from shared memory (K-major);
//   P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta)    in registers (masked entries 0);
//   dV += P^T dO, dK += dS^T Q        wgmma, P^T and dS^T from registers, dO and Q read
//                                     transposed (MN-major);
//   dQ[tile] += dS K                  dS^T through shared memory (read transposed), K read
//                                     transposed; each warpgroup computes half of dQ's columns
//                                     over all 128 keys and adds it to the fp32 workspace with
//                                     float2 atomics.
// dQ waits a step: both warpgroups' dS^T rows must be in before it, and a block barrier there
// would stop both every step. So dQ of step i is issued in step i+1, behind that step's S^T and
// dP^T (the block barrier at the end of step i has made dS^T whole), runs while the elementwise
// pass does, and is added once step i+1's dV and dK are issued; dS^T is double-buffered.
// dK = scale dK and dV are written as bf16 at the end; delta = rowsum(dO * O) comes precomputed
// and dq is scaled and converted afterwards, as for the sm_80 kernel (flash_attention.cu).
//
// The second warpgroup issues each step's first products after the first has issued its own
// (flash_attention_wgmma_tile.cuh), so that one's elementwise pass runs under the other's products.
//
// Shared memory (wgmma.cuh's 128-byte swizzled layout; every tile 1024-byte aligned): K, V
// (Bc x D), two stages of Q and dO (Bq x D) and of dS^T (Bc x Bq), then lse, delta and doc_start
// of the query tile (Bq each) twice. D = 128: 161.5 KB; D = 64: 97.5 KB.
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_internal.h"
#include "ops/cuda/flash_attention_tile.cuh"
#include "ops/cuda/sm90a/flash_attention_wgmma_tile.cuh"
#include "ops/cuda/sm90a/wgmma.cuh"

namespace ferry::flash {
namespace sm90 {
namespace {

template <int D_, int MinBlocks_>
struct BackwardTile {
  static constexpr int D = D_, MinBlocks = MinBlocks_;
  static constexpr int Groups = 2, Bc = 64 * Groups, Bq = 64, Threads = 128 * Groups;
  static constexpr uint32_t kKVBytes = Bc * D * 2;  // K or V
  static constexpr uint32_t kQBytes = Bq * D * 2;   // Q or dO, one stage
  static constexpr uint32_t kK = 0, kV = kKVBytes, kQ = 2 * kKVBytes, kDo = kQ + 2 * kQBytes,
                            kDs = kDo + 2 * kQBytes, kVec = kDs + 2 * Bc * Bq * 2;
  static constexpr size_t kSmemBytes = 1024 + kVec + 3 * 2 * Bq * 4;
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 bf16 wide per swizzle block");
  static_assert(Bq == 64, "dS^T rows are one 128-byte swizzle block");
};

// d (64 x D) += A B, A from registers, B (16 rows x D) MN-major at `b`.
template <int D>
__device__ __forceinline__ void product_rs(float (&d)[D / 2], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (D == 128)
    wgmma_rs_n128<1>(d, a, b, 1);
  else
    wgmma_rs_n64<1>(d, a, b, 1);
}

// d (64 x D/2) (+)= A B, both MN-major in shared memory.
template <int D>
__device__ __forceinline__ void product_ss_mn(float (&d)[D / 4], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (D == 128)
    wgmma_ss_n64<1, 1>(d, a, b, accumulate);
  else
    wgmma_ss_n32<1, 1>(d, a, b, accumulate);
}

// This thread's dQ accumulators (rows 16 (warp % 4) + g (+8) of the query tile at t0, columns
// D/2 * group + 8i + 2tq..) into the fp32 workspace.
template <int D>
__device__ __forceinline__ void add_dq(float* dq_accum, const float (&dq)[D / 4], int t0, int h, int T,
                                       int q_heads, int warp, int group, int g, int tq) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = t0 + 16 * (warp % 4) + g + 8 * r;
    if (t >= T) continue;
    float* const dst = dq_accum + (static_cast<int64_t>(t) * q_heads + h) * D + group * (D / 2) + 2 * tq;
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
      atomicAdd(reinterpret_cast<float2*>(dst + 8 * i),
                make_float2(dq[4 * i + 2 * r], dq[4 * i + 2 * r + 1]));
  }
}

template <class Tile>
__global__ void __launch_bounds__(Tile::Threads, Tile::MinBlocks)
    backward_kernel(const FlashAttentionBackwardParams bp, const float* __restrict__ delta, float* dq_accum) {
#ifdef FERRY_WGMMA
  constexpr int D = Tile::D, Bc = Tile::Bc, Bq = Tile::Bq;
  constexpr int kSt = Bq / 2;  // S^T accumulators a thread (64 keys x Bq queries over 128 threads)
  const FlashAttentionParams& p = bp.fwd;

  extern __shared__ unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  const unsigned char* const s_k = smem + Tile::kK;
  const unsigned char* const s_v = smem + Tile::kV;
  unsigned char* const s_ds_base = smem + Tile::kDs;                 // [2][Bc x Bq]
  float* const s_lse = reinterpret_cast<float*>(smem + Tile::kVec);  // [2][Bq]
  float* const s_delta = s_lse + 2 * Bq;                             // [2][Bq]
  int* const s_doc = reinterpret_cast<int*>(s_delta + 2 * Bq);       // [2][Bq]

  const int T = static_cast<int>(p.tokens);
  const int kvh = blockIdx.x;
  const int j0 = blockIdx.y * Bc;
  const int heads = p.q_heads / p.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / 4;
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
  const int steps = heads * qt_count;  // (query head, query tile) pairs

  load_swizzled<D, Bc, Tile::Threads>(smem + Tile::kK, static_cast<const bf16*>(p.k) + kvh * D, kv_stride, j0,
                                      T);
  load_swizzled<D, Bc, Tile::Threads>(smem + Tile::kV, static_cast<const bf16*>(p.v) + kvh * D, kv_stride, j0,
                                      T);
  auto load_step = [&](int stage, int step) {
    const int h = kvh * heads + step / qt_count;
    const int t0 = (qt_begin + step % qt_count) * Bq;
    load_swizzled<D, Bq, Tile::Threads>(smem + Tile::kQ + stage * Tile::kQBytes,
                                        static_cast<const bf16*>(p.q) + static_cast<int64_t>(h) * D, q_stride,
                                        t0, T);
    load_swizzled<D, Bq, Tile::Threads>(smem + Tile::kDo + stage * Tile::kQBytes,
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
  fence_proxy_async();
  __syncthreads();

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
  const float scale_log2 = p.scale * kLog2e;
  // This thread's two key rows (of the warpgroup's 64) and their block-relative index.
  const int key_local = 64 * group + 16 * (warp % 4) + g;
  const int key[2] = {j0 + key_local, j0 + key_local + 8};
  const int group_first_key = j0 + 64 * group;
  const unsigned char* const s_k_group = s_k + group * 64 * 128;
  const unsigned char* const s_v_group = s_v + group * 64 * 128;

  // At D = 64 the loads of step+1 are issued while step's S^T and dP^T products run (+2%); at
  // D = 128 that measured 1% slower than issuing them first (docs/performance.md).
  constexpr bool kLoadUnderProducts = D == 64;
  auto load_next = [&](int step) {
    if (step + 1 < steps) load_step((step & 1) ^ 1, step + 1);
    cp_async_commit();
  };
  // dQ (Bq x D) of the previous step's tile: this warpgroup's D/2 columns, k over the block's 128
  // keys. dS (queries x keys) is dS^T read transposed; K's columns D/2 * group.. start that many
  // bf16 into its rows (its second column block for D = 128).
  float dq[D / 4];
  int prev_t0 = T, prev_h = 0;  // no rows before the first step
  const uint32_t k_cols = D == 128 ? group * Bc * 128 : group * (D / 2) * 2;
  auto issue_dq = [&](const unsigned char* s_ds) {
#pragma unroll
    for (int i = 0; i < D / 4; ++i) dq[i] = 0.0f;
    wgmma_fence();  // dq was just zeroed by ordinary instructions
#pragma unroll
    for (int ks = 0; ks < Bc / 16; ++ks)
      product_ss_mn<D>(dq, smem_descriptor(s_ds + ks * 16 * 128, Bq * 128, 1024),
                       smem_descriptor(s_k + k_cols + ks * 16 * 128, Bc * 128, 1024), ks > 0);
    wgmma_commit();
  };
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (!kLoadUnderProducts) load_next(step);
    const int h = kvh * heads + step / qt_count;
    const int t0 = (qt_begin + step % qt_count) * Bq;
    const unsigned char* const s_q = smem + Tile::kQ + stage * Tile::kQBytes;
    const unsigned char* const s_do = smem + Tile::kDo + stage * Tile::kQBytes;
    const float* const lse = s_lse + stage * Bq;
    const float* const dlt = s_delta + stage * Bq;
    const int* const doc = s_doc + stage * Bq;
    unsigned char* const s_ds = s_ds_base + stage * Bc * Bq * 2;

    // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys.
    float st[kSt], dpt[kSt];
#pragma unroll
    for (int i = 0; i < kSt; ++i) st[i] = dpt[i] = 0.0f;
    if (group == 1) second_warpgroup_waits_its_turn();
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t kv_off = (ks / 4) * Bc * 128 + (ks % 4) * 32,
                     q_off = (ks / 4) * Bq * 128 + (ks % 4) * 32;
      wgmma_ss_n64<0, 0>(st, smem_descriptor(s_k_group + kv_off, 16, 1024),
                         smem_descriptor(s_q + q_off, 16, 1024), ks > 0);
    }
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t kv_off = (ks / 4) * Bc * 128 + (ks % 4) * 32,
                     q_off = (ks / 4) * Bq * 128 + (ks % 4) * 32;
      wgmma_ss_n64<0, 0>(dpt, smem_descriptor(s_v_group + kv_off, 16, 1024),
                         smem_descriptor(s_do + q_off, 16, 1024), ks > 0);
    }
    wgmma_commit();
    if (group == 0) first_warpgroup_gives_the_turn();
    if (kLoadUnderProducts) load_next(step);
    // The previous step's dQ. Step 0 issues one too, from the unused buffer, and adds no rows of
    // it: with the same instructions every step, ptxas keeps the products in flight (where a
    // branch skipped them it serialised them: C7514).
    issue_dq(s_ds_base + (stage ^ 1) * Bc * Bq * 2);
    wgmma_wait<1>();
    fence_registers(st);
    fence_registers(dpt);

    // P^T into st, dS^T into dpt. Element e of column group i: key key[e >> 1], query t0 + ql.
    // Where every query of the tile sees every key of the warpgroup (the tile's queries all exist,
    // the first comes at or after the last key, and doc_start, nondecreasing, is at or before the
    // first key at the last query), the per-element mask is skipped.
    auto probabilities = [&](auto masked) {
#pragma unroll
      for (int i = 0; i < Bq / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = 8 * i + 2 * tq + (e & 1);
          float pr = exp2_approx(fmaf(st[4 * i + e], scale_log2, -lse[ql] * kLog2e));
          if constexpr (decltype(masked)::value) {
            const int t = t0 + ql;
            const int j = key[e >> 1];
            if (!(t < T && j >= doc[ql] && j <= t)) pr = 0.0f;
          }
          st[4 * i + e] = pr;
          dpt[4 * i + e] = pr * (dpt[4 * i + e] - dlt[ql]);
        }
      }
    };
    if (t0 + Bq <= T && t0 >= group_first_key + 63 && doc[Bq - 1] <= group_first_key)
      probabilities(std::false_type{});
    else
      probabilities(std::true_type{});
    // As bf16 A fragments (16 queries a product), and dS^T into shared memory for dQ: row key_local
    // (+8), queries 8i + 2tq.. in the swizzled [Bc keys][Bq queries] tile.
    uint32_t pa[Bq / 16][4], da[Bq / 16][4];
#pragma unroll
    for (int kk = 0; kk < Bq / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pa[kk][r] = pack_bf16(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
        da[kk][r] = pack_bf16(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < Bq / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // Register r of a 16-column step: row key_local + 8 (r & 1), query 16kk + 8 (r >> 1) + 2tq.
        const int row = key_local + 8 * (r & 1), col = 16 * kk + 8 * (r >> 1) + 2 * tq;
        *reinterpret_cast<uint32_t*>(s_ds + swizzle_offset(Bc, row, col)) = da[kk][r];
      }
    }
    // dV += P^T dO and dK += dS^T Q: k runs over the tile's queries, 16 a product; dO and Q rows
    // 16kk.. start 16kk * 128 bytes into each of their column blocks.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Bq / 16; ++kk) {
      product_rs<D>(dv, pa[kk], smem_descriptor(s_do + kk * 16 * 128, Bq * 128, 1024));
      product_rs<D>(dk, da[kk], smem_descriptor(s_q + kk * 16 * 128, Bq * 128, 1024));
    }
    wgmma_commit();
    wgmma_wait<1>();  // the previous dQ; dV and dK may still run
    fence_registers(dq);
    add_dq<D>(dq_accum, dq, prev_t0, prev_h, T, p.q_heads, warp, group, g, tq);
    prev_t0 = t0;
    prev_h = h;
    wgmma_wait<0>();
    fence_registers(dk);
    fence_registers(dv);
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // step+1's tiles and both warpgroups' dS^T are in; this stage is free
  }
  if (steps > 0) {
    issue_dq(s_ds_base + ((steps - 1) & 1) * Bc * Bq * 2);
    wgmma_wait<0>();
    fence_registers(dq);
    add_dq<D>(dq_accum, dq, prev_t0, prev_h, T, p.q_heads, warp, group, g, tq);
  }

  bf16* const dk_out = static_cast<bf16*>(bp.dk) + kvh * D;
  bf16* const dv_out = static_cast<bf16*>(bp.dv) + kvh * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= T) continue;
    const int64_t row = key[r] * kv_stride;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<uint32_t*>(dk_out + row + 8 * i + 2 * tq) =
          pack_bf16(p.scale * dk[4 * i + 2 * r], p.scale * dk[4 * i + 2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_out + row + 8 * i + 2 * tq) =
          pack_bf16(dv[4 * i + 2 * r], dv[4 * i + 2 * r + 1]);
    }
  }
#else
  __trap();
#endif
}

template <class Tile>
void launch_backward(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum,
                     void* stream) {
  const int tiles = static_cast<int>((p.fwd.tokens + Tile::Bc - 1) / Tile::Bc);
  const auto kernel = backward_kernel<Tile>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(Tile::kSmemBytes)));
  kernel<<<dim3(p.fwd.kv_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      p, delta, dq_accum);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace sm90

void backward_wgmma(const FlashAttentionBackwardParams& p, const float* delta, float* dq_accum,
                    void* stream) {
  if (p.fwd.head_dim == 64)
    sm90::launch_backward<sm90::BackwardTile<64, 1>>(p, delta, dq_accum, stream);
  else
    sm90::launch_backward<sm90::BackwardTile<128, 1>>(p, delta, dq_accum, stream);
}

}  // namespace ferry::flash
