// The flash attention forward on Hopper's warpgroup products (wgmma), for head_dim 64 and 128:
// FlashAttention-2's schedule (flash_attention_forward.cuh) with each warpgroup's products issued
// by the warpgroup at once from shared memory, instead of by each warp from registers.
//
// One block per (query head h, tile of Br = 128 queries), two warpgroups of 64 query rows each.
// Per key tile of Bc = 128 keys, through shared memory, 3 stages deep at D = 128 and 2 at D = 64
// (where a third would leave room for one block an SM instead of two), copied by the TMA (tma.cuh)
// on one thread's word and waited for on the stage's mbarrier:
//   S (64 x Bc) = Q K^T    wgmma, Q and K from shared memory (K-major);
//   mask, online softmax   in registers, as the sm_80 kernel does (base-2 exponentials);
//   O (64 x D) += P V      wgmma, P from the accumulator registers as bf16, V from shared memory
//                          read transposed (MN-major).
// No block barrier between the steps: the two warpgroups take turns to issue their Q K^T, the
// second after the first, the first after the second's of the step before
// (flash_attention_wgmma_tile.cuh), so one's softmax overlaps the other's products. When the
// second warpgroup has its turn at tile kt, both are done with tile kt - 1, whose stage its first
// thread then fills with tile kt + Stages - 1.
//
// Shared memory (wgmma.cuh's 128-byte swizzled layout, every tile 1024-byte aligned): Q (Br x D),
// then the stages of [K (Bc x D)][V (Bc x D)], then each warp's smallest and largest doc_start,
// then a barrier a stage. D = 128: 225 KB, one block per SM; D = 64: 80 KB, two.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

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

template <int D_, int MinBlocks_, int Stages_>
struct ForwardTile {
  static constexpr int D = D_, MinBlocks = MinBlocks_, Stages = Stages_;
  static constexpr int Groups = 2, Br = 64 * Groups, Bc = 128, Threads = 128 * Groups, Warps = 4 * Groups;
  static constexpr uint32_t kQBytes = Br * D * 2;
  static constexpr uint32_t kTileBytes = Bc * D * 2;  // one K or V tile
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;
  static constexpr uint32_t kDocOffset = kQBytes + Stages * kStageBytes;
  static constexpr uint32_t kBarOffset = kDocOffset + 2 * sizeof(int) * Warps;  // 8-byte aligned
  // 1024 bytes of slack to align the start; then 2 ints per warp and a barrier per stage.
  static constexpr size_t kSmemBytes = 1024 + kBarOffset + sizeof(uint64_t) * Stages;
  static constexpr int kProducer = 128;  // the second warpgroup's first thread issues the copies
  static_assert(D == 64 || D == 128, "wgmma tiles are 64 bf16 wide per swizzle block");
};

// d (64 x N) += A B for N = 128 or 64, A from registers, B MN-major in shared memory.
template <int N>
__device__ __forceinline__ void product_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (N == 128)
    wgmma_rs_n128<1>(d, a, b, 1);
  else
    wgmma_rs_n64<1>(d, a, b, 1);
}

template <class Tile>
__global__ void __launch_bounds__(Tile::Threads, Tile::MinBlocks)
    forward_kernel(const FlashAttentionParams p, const __grid_constant__ CUtensorMap k_map,
                   const __grid_constant__ CUtensorMap v_map) {
#ifdef FERRY_WGMMA
  constexpr int D = Tile::D, Br = Tile::Br, Bc = Tile::Bc, Warps = Tile::Warps;
  constexpr int kS = Bc / 2;  // S accumulators a thread (64 x Bc over 128 threads)
  constexpr int kO = D / 2;   // O accumulators a thread

  extern __shared__ unsigned char smem_raw[];
  unsigned char* const smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  unsigned char* const s_q = smem;
  unsigned char* const s_kv = smem + Tile::kQBytes;
  int* const s_doc = reinterpret_cast<int*>(smem + Tile::kDocOffset);  // [Warps] minima, [Warps] maxima
  uint64_t* const stage_full = reinterpret_cast<uint64_t*>(smem + Tile::kBarOffset);

  const int T = static_cast<int>(p.tokens);
  const int h = blockIdx.x;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * Br;  // later query tiles see more keys: first
  const int kvh = h / (p.q_heads / p.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / 4;
  const int g = lane / 4, tq = lane % 4;
  const int64_t q_stride = static_cast<int64_t>(p.q_heads) * D;
  const bf16* const q = static_cast<const bf16*>(p.q) + static_cast<int64_t>(h) * D;

  load_swizzled<D, Br, Tile::Threads>(s_q, q, q_stride, q0, T);
  cp_async_commit();
  if (threadIdx.x == 0)
    for (int st = 0; st < Tile::Stages; ++st) mbarrier_init(stage_full + st, 1);

  // This warp's rows w0..w0+15 (lane i < 16 reads row w0 + i's doc_start; rows at or past T get
  // INT_MAX, which masks every key for them), and the two rows this thread's accumulators hold.
  const int w0 = q0 + 16 * warp;
  const int lane_row = w0 + (lane & 15);
  const int lane_doc = lane_row < T ? p.doc_start[lane_row] : INT_MAX;
  // Every lane of the warp takes part in both reductions (a full-mask reduction that some lane
  // skips never completes).
  const int w_doc_max = __reduce_max_sync(kFullMask, lane_row < T ? lane_doc : -1);
  const int w_doc_min = __reduce_min_sync(kFullMask, lane_doc);
  if (lane == 0) {
    s_doc[warp] = w_doc_min;
    s_doc[Warps + warp] = w_doc_max;
  }
  const int row[2] = {w0 + g, w0 + g + 8};
  const int doc[2] = {__shfl_sync(kFullMask, lane_doc, g), __shfl_sync(kFullMask, lane_doc, g + 8)};
  __syncthreads();

  int block_doc_min = INT_MAX, group_doc_min = INT_MAX;
#pragma unroll
  for (int w = 0; w < Warps; ++w) {
    block_doc_min = min(block_doc_min, s_doc[w]);
    if (w / 4 == group) group_doc_min = min(group_doc_min, s_doc[w]);
  }
  const int group_last = min(q0 + 64 * group + 63, T - 1);  // < the group's first row if it has none
  const int kt_begin = block_doc_min / Bc;
  const int kt_end = (min(q0 + Br, T) - 1) / Bc + 1;

  // By the producer thread alone: K and V of tile kt into `stage`, D / 64 boxes of Bc rows each.
  auto load_kv = [&](int stage, int kt) {
    unsigned char* const s_k = s_kv + stage * Tile::kStageBytes;
    mbarrier_arrive_expect_bytes(stage_full + stage, Tile::kStageBytes);
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb) {
      tma_load_box(s_k + cb * Bc * 128, k_map, 64 * cb, kvh, kt * Bc, stage_full + stage);
      tma_load_box(s_k + Tile::kTileBytes + cb * Bc * 128, v_map, 64 * cb, kvh, kt * Bc, stage_full + stage);
    }
  };
  // Tiles kt_begin.. fill all stages but one; each step then loads the tile Stages - 1 ahead into
  // the stage of the step before.
  if (threadIdx.x == Tile::kProducer)
    for (int st = 0; st < Tile::Stages - 1; ++st)
      if (kt_begin + st < kt_end) load_kv(st, kt_begin + st);
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();  // Q is in

  float o[kO];
#pragma unroll
  for (int i = 0; i < kO; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of scaled scores (log2 units)
  float l[2] = {0.0f, 0.0f};            // this thread's share of the running sum (quad-reduced at the end)
  const float scale_log2 = p.scale * kLog2e;
  const unsigned char* const s_q_group = s_q + group * 64 * 128;

  // The step's stage and the parity of its barrier's phase, advanced without a division by Stages.
  int stage = 0;
  uint32_t phase = 0;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const unsigned char* const s_k = s_kv + stage * Tile::kStageBytes;
    const unsigned char* const s_v = s_k + Tile::kTileBytes;
    const int j0 = kt * Bc;
    if (group == 1) {
      second_warpgroup_waits_its_turn();
      if (threadIdx.x == Tile::kProducer && kt + Tile::Stages - 1 < kt_end)
        load_kv(stage == 0 ? Tile::Stages - 1 : stage - 1, kt + Tile::Stages - 1);
    } else if (kt > kt_begin) {
      first_warpgroup_waits_its_turn();
    }
    const bool pass_back = group == 1 && kt + 1 < kt_end;  // the first warpgroup has a next step
    mbarrier_wait(stage_full + stage, phase);
    // Uniform over the warpgroup, as its products must be.
    if (j0 <= group_last && j0 + Bc - 1 >= group_doc_min) {
      float s[kS];
#pragma unroll
      for (int i = 0; i < kS; ++i) s[i] = 0.0f;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t k_byte = (ks % 4) * 32;  // the k16 step inside its column block
        const uint64_t a = smem_descriptor(s_q_group + (ks / 4) * Br * 128 + k_byte, 16, 1024);
        const uint64_t b = smem_descriptor(s_k + (ks / 4) * Bc * 128 + k_byte, 16, 1024);
        wgmma_ss_n128<0, 0>(s, a, b, ks > 0);
      }
      wgmma_commit();
      if (group == 0) first_warpgroup_gives_the_turn();
      if (pass_back) second_warpgroup_gives_the_turn();
      wgmma_wait<0>();
      fence_registers(s);

      // Masked scores become -inf; the others stay raw (scale > 0, so the row maximum of the raw
      // scores times the scale is that of the scaled ones).
      if (!(j0 + Bc - 1 <= w0 && j0 >= w_doc_max)) {
#pragma unroll
        for (int i = 0; i < Bc / 8; ++i) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = j0 + 8 * i + 2 * tq + (e & 1);
            const int r = e >> 1;
            if (j < doc[r] || j > row[r]) s[4 * i + e] = -INFINITY;
          }
        }
      }
      // Online softmax, row by row (a row's Bc scores are spread over the 4 lanes of a quad), in
      // base 2: p = 2^(scale log2(e) s - m), one FFMA and one ex2 a score (the softmax, not the
      // products, is what bounds this kernel: docs/performance.md).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < Bc / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float m_new = fmaxf(m[r], mx * scale_log2);
        // A row with no visible key yet keeps m = -inf; subtracting 0 then gives 2^-inf = 0, not NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = exp2_approx(m[r] - m_use);
        m[r] = m_new;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          o[4 * i + 2 * r] *= alpha;
          o[4 * i + 2 * r + 1] *= alpha;
        }
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < Bc / 8; ++i) {
          s[4 * i + 2 * r] = exp2_approx(fmaf(s[4 * i + 2 * r], scale_log2, -m_use));
          s[4 * i + 2 * r + 1] = exp2_approx(fmaf(s[4 * i + 2 * r + 1], scale_log2, -m_use));
          sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        }
        l[r] = l[r] * alpha + sum;
      }
      // O += P V, 16 keys a product: P's columns 16kk.. are the A fragment (wgmma.cuh), and V's
      // rows 16kk.. start 16kk * 128 bytes into each of its column blocks.
      uint32_t pa[Bc / 16][4];
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        pa[kk][0] = pack_bf16(s[8 * kk], s[8 * kk + 1]);
        pa[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      }
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk)
        product_rs<D>(o, pa[kk], smem_descriptor(s_v + kk * 16 * 128, Bc * 128, 1024));
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(o);
    } else if (group == 0) {
      first_warpgroup_gives_the_turn();  // a tile it skips still passes the turn
    } else if (pass_back) {
      second_warpgroup_gives_the_turn();
    }
    if (++stage == Tile::Stages) {
      stage = 0;
      phase ^= 1;
    }
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
  bf16* const out = static_cast<bf16*>(p.out) + static_cast<int64_t>(h) * D;
  const int64_t out_stride = out_row_elements(p);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T) continue;
    bf16* const out_row = out + row[r] * out_stride + 2 * tq;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<uint32_t*>(out_row + 8 * i) =
          pack_bf16(o[4 * i + 2 * r] * inv[r], o[4 * i + 2 * r + 1] * inv[r]);
  }
#else
  __trap();
#endif
}

template <class Tile>
void launch_forward(const FlashAttentionParams& p, void* stream) {
  const int tiles = static_cast<int>((p.tokens + Tile::Br - 1) / Tile::Br);
  const auto kernel = forward_kernel<Tile>;
  FERRY_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(Tile::kSmemBytes)));
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * Tile::D;
  const CUtensorMap k_map = head_rows_tensor_map(p.k, p.tokens, p.kv_heads, Tile::D, kv_row, Tile::Bc);
  const CUtensorMap v_map = head_rows_tensor_map(p.v, p.tokens, p.kv_heads, Tile::D, kv_row, Tile::Bc);
  kernel<<<dim3(p.q_heads, tiles), Tile::Threads, Tile::kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      p, k_map, v_map);
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace sm90

void forward_wgmma(const FlashAttentionParams& p, void* stream) {
  if (p.head_dim == 64)
    sm90::launch_forward<sm90::ForwardTile<64, 2, 2>>(p, stream);
  else
    sm90::launch_forward<sm90::ForwardTile<128, 1, 3>>(p, stream);
}

}  // namespace ferry::flash
