// The flash attention backward on Hopper's warpgroup products (wgmma), for head_dim 64 and 128:
// the schedule of the sm_80 backward (flash_attention_backward.cuh) with every product issued by
// a warpgroup at once.
//
// One block per (kv head, tile of Bc = 128 keys), two warpgroups of 64 keys each; each keeps its
// keys' dK and dV (64 x D fp32) in registers for the whole block. The block walks, for every query
// head of the GQA group, the query tiles (Bq = 64 queries) that can see its keys, Q, dO, lse,
// delta and doc_start of tile i+1 loading while tile i computes: Q and dO by the TMA, the others
// by cp.async, all issued by one warp and waited for on the stage's mbarrier (tma.cuh). Per step
// and warpgroup, keys as rows:
//   S^T = K Q^T, dP^T = V dO^T        wgmma, K, V, Q, dO from shared memory (K-major);
//   P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta)    in registers (masked entries 0);
//   dV += P^T dO, dK += dS^T Q        wgmma, P^T and dS^T from registers, dO and Q read
//                                     transposed (MN-major);
//   dQ[tile] += dS K                  dS^T through shared memory (read transposed), K read
//                                     transposed; each warpgroup computes half of dQ's columns
//                                     over all 128 keys and adds it to the fp32 workspace with
//                                     float2 atomics.
// dQ waits a step: both warpgroups' dS^T rows must be in before it. So dQ of step i is issued in
// step i+1, behind that step's S^T and dP^T, runs while the elementwise pass does, and is added
// once step i+1's dV and dK are issued; dS^T has three buffers (step i+3 writes the one dQ of step
// i read, which both warpgroups have waited for by then).
// dK = scale dK and dV are written as bf16 at the end; delta = rowsum(dO * O) comes precomputed
// and dq is scaled and converted afterwards, as for the sm_80 kernel (flash_attention.cu).
//
// No block barrier between the steps. The warpgroups take turns to issue their first products
// (flash_attention_wgmma_tile.cuh): the second after the first, the first after the second's of
// the step before, so that one's elementwise pass runs under the other's products. When the second
// has its turn at step i, both are done with step i - 1, whose stage its first warp then fills with
// step i + 1. The first, ahead, waits for the second's dS^T rows of step i - 1 (named barrier 3)
// before its turn passes and before its dQ of step i - 1; the second's turn comes after the
// first's rows are in.
//
// Shared memory (wgmma.cuh's 128-byte swizzled layout; every tile 1024-byte aligned): K, V
// (Bc x D), two stages of Q and dO (Bq x D), three buffers of dS^T (Bc x Bq), then lse, delta and
// doc_start of the query tile (Bq each) twice, then a barrier a stage. D = 128: 178.5 KB; D = 64:
// 114.5 KB (each with the 1 KB that aligns the start).
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_internal.h"
#include "ops/cuda/flash_attention_tile.cuh"
#include "ops/cuda/sm90a/flash_attention_wgmma_tile.cuh"
#include "ops/cuda/sm90a/tensor_map.h"
#include "ops/cuda/sm90a/tma.cuh"
#include "ops/cuda/sm90a/wgmma.cuh"

namespace ferry::flash {
namespace sm90 {
namespace {

template <int D_, int MinBlocks_>
struct BackwardTile {
  static constexpr int D = D_, MinBlocks = MinBlocks_;
  static constexpr int Groups = 2, Bc = 64 * Groups, Bq = 64, Threads = 128 * Groups;
  static constexpr int DsBuffers = 3;
  static constexpr uint32_t kKVBytes = Bc * D * 2;  // K or V
  static constexpr uint32_t kQBytes = Bq * D * 2;   // Q or dO, one stage
  static constexpr uint32_t kDsBytes = Bc * Bq * 2;
  static constexpr uint32_t kK = 0, kV = kKVBytes, kQ = 2 * kKVBytes, kDo = kQ + 2 * kQBytes,
                            kDs = kDo + 2 * kQBytes, kVec = kDs + DsBuffers * kDsBytes,
                            kBar = kVec + 3 * 2 * Bq * 4;
  static constexpr size_t kSmemBytes = 1024 + kBar + 2 * sizeof(uint64_t);
  // The second warpgroup's first warp loads the steps: its first lane announces the bytes of Q and
  // dO, each of its lanes arrives once its copies of lse, delta and doc_start land.
  static constexpr int kLoaderWarp = 4;
  static constexpr uint32_t kStageArrivals = 1 + 32;
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

// The second warpgroup's dS^T rows of a step are in (named barrier 3: the second arrives, the
// first waits).
__device__ __forceinline__ void second_warpgroup_has_written_its_rows() {
  asm volatile("bar.arrive 3, 256;\n" ::: "memory");
}
__device__ __forceinline__ void first_warpgroup_waits_for_the_seconds_rows() {
  asm volatile("bar.sync 3, 256;\n" ::: "memory");
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
    backward_kernel(const FlashAttentionBackwardParams bp, const float* __restrict__ delta, float* dq_accum,
                    const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map) {
#ifdef FERRY_WGMMA
  constexpr int D = Tile::D, Bc = Tile::Bc, Bq = Tile::Bq;
  constexpr int kSt = Bq / 2;  // S^T accumulators a thread (64 keys x Bq queries over 128 threads)
  const FlashAttentionParams& p = bp.fwd;

  extern __shared__ unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  const unsigned char* const s_k = smem + Tile::kK;
  const unsigned char* const s_v = smem + Tile::kV;
  unsigned char* const s_ds_base = smem + Tile::kDs;                            // [3][Bc x Bq]
  float* const s_lse = reinterpret_cast<float*>(smem + Tile::kVec);             // [2][Bq]
  float* const s_delta = s_lse + 2 * Bq;                                        // [2][Bq]
  int* const s_doc = reinterpret_cast<int*>(s_delta + 2 * Bq);                  // [2][Bq]
  uint64_t* const stage_full = reinterpret_cast<uint64_t*>(smem + Tile::kBar);  // [2]

  const int T = static_cast<int>(p.tokens);
  const int kvh = blockIdx.x;
  const int j0 = blockIdx.y * Bc;
  const int heads = p.q_heads / p.kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / 4;
  const int g = lane / 4, tq = lane % 4;
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
  cp_async_commit();
  if (threadIdx.x == 0) {
    mbarrier_init(stage_full, Tile::kStageArrivals);
    mbarrier_init(stage_full + 1, Tile::kStageArrivals);
  }
  __syncthreads();  // the barriers are initialised
  // The steps walk the query tiles t0 = first_t0, first_t0 + Bq, .. < end_t0 of each query head h
  // in turn; next_tile moves (h, t0) one step on (no division in the loop).
  const int first_t0 = qt_begin * Bq, end_t0 = (qt_begin + qt_count) * Bq;
  auto next_tile = [&](int& h, int& t0) {
    t0 += Bq;
    if (t0 == end_t0) {
      t0 = first_t0;
      ++h;
    }
  };
  // By the loader warp alone: the step's Q and dO (TMA, D / 64 boxes of Bq rows each) and its
  // lse, delta and doc_start (cp.async, two rows a lane), into `stage`.
  auto load_step = [&](int stage, int h, int t0) {
    uint64_t* const full = stage_full + stage;
    if (lane == 0) {
      mbarrier_arrive_expect_bytes(full, 2 * Tile::kQBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        tma_load_box(smem + Tile::kQ + stage * Tile::kQBytes + cb * Bq * 128, q_map, 64 * cb, h, t0, full);
        tma_load_box(smem + Tile::kDo + stage * Tile::kQBytes + cb * Bq * 128, do_map, 64 * cb, h, t0, full);
      }
    }
#pragma unroll
    for (int r = lane; r < Bq; r += 32) {
      const int t = t0 + r;
      const bool valid = t < T;
      const int64_t i = static_cast<int64_t>(h) * T + (valid ? t : 0);
      cp_async_4(s_lse + stage * Bq + r, p.lse + i, valid);
      cp_async_4(s_delta + stage * Bq + r, delta + i, valid);
      cp_async_4(s_doc + stage * Bq + r, p.doc_start + (valid ? t : 0), valid);
    }
    mbarrier_arrive_after_copies(full);
  };
  if (warp == Tile::kLoaderWarp) load_step(0, kvh * heads, first_t0);
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();  // K and V are in

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

  // dQ (Bq x D) of the previous step's tile: this warpgroup's D/2 columns, k over the block's 128
  // keys. dS (queries x keys) is dS^T read transposed; K's columns D/2 * group.. start that many
  // bf16 into its rows (its second column block for D = 128).
  float dq[D / 4];
  int prev_t0 = T, prev_h = 0;  // no rows before the first step
  int h = kvh * heads, t0 = first_t0;
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
    const unsigned char* const s_q = smem + Tile::kQ + stage * Tile::kQBytes;
    const unsigned char* const s_do = smem + Tile::kDo + stage * Tile::kQBytes;
    const float* const lse = s_lse + stage * Bq;
    const float* const dlt = s_delta + stage * Bq;
    const int* const doc = s_doc + stage * Bq;
    // Recomputed each step (a multiply-high): carried across steps instead, the index spilled
    // registers at D = 128.
    const int ds = step % Tile::DsBuffers;
    unsigned char* const s_ds = s_ds_base + ds * Tile::kDsBytes;

    // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys.
    float st[kSt], dpt[kSt];
#pragma unroll
    for (int i = 0; i < kSt; ++i) st[i] = dpt[i] = 0.0f;
    if (group == 1) {
      second_warpgroup_waits_its_turn();
      if (warp == Tile::kLoaderWarp && step + 1 < steps) {
        int next_h = h, next_t0 = t0;
        next_tile(next_h, next_t0);
        load_step(stage ^ 1, next_h, next_t0);
      }
    } else if (step > 0) {
      first_warpgroup_waits_its_turn();
    }
    mbarrier_wait(stage_full + stage, (step >> 1) & 1);
    // Read before the products are issued, so that the mask's test below does not wait for it.
    const int last_doc = doc[Bq - 1];
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
    if (group == 1 && step + 1 < steps) second_warpgroup_gives_the_turn();
    if (group == 0) {
      if (step > 0) first_warpgroup_waits_for_the_seconds_rows();  // of step - 1
      first_warpgroup_gives_the_turn();
    }
    // The previous step's dQ. Step 0 issues one too, from a buffer not yet written, and adds no
    // rows of it: with the same instructions every step, ptxas keeps the products in flight (where
    // a branch skipped them it serialised them: C7514).
    issue_dq(s_ds_base + (ds == 0 ? Tile::DsBuffers - 1 : ds - 1) * Tile::kDsBytes);
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
    if (t0 + Bq <= T && t0 >= group_first_key + 63 && last_doc <= group_first_key)
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
    fence_proxy_async();  // for the dQ products of both warpgroups
    if (group == 1) second_warpgroup_has_written_its_rows();
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
    next_tile(h, t0);
    wgmma_wait<0>();
    fence_registers(dk);
    fence_registers(dv);
  }
  if (steps > 0) {
    if (group == 0) first_warpgroup_waits_for_the_seconds_rows();
    issue_dq(s_ds_base + ((steps - 1) % Tile::DsBuffers) * Tile::kDsBytes);
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
  const FlashAttentionParams& f = p.fwd;
  const CUtensorMap q_map = head_rows_tensor_map(f.q, f.tokens, f.q_heads, Tile::D,
                                                 static_cast<int64_t>(f.q_heads) * Tile::D, Tile::Bq);
  const CUtensorMap do_map =
      head_rows_tensor_map(p.dout, f.tokens, f.q_heads, Tile::D, out_row_elements(f), Tile::Bq);
  kernel<<<dim3(f.kv_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      p, delta, dq_accum, q_map, do_map);
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
