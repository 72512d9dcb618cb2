// Flash attention on the GPU: causal self-attention with grouped query heads and document masking,
// bf16 in and out, fp32 softmax and accumulation, O(T) memory (no T x T matrix is ever stored).
//
// Semantics are ops.h's attention_forward / attention_backward: query t of head h attends keys j
// with doc_start[t] <= j <= t of kv head h / (Hq / Hkv), with scores scale * q.k. As in the CPU
// reference, doc_start must describe contiguous documents (each token starts a document,
// doc_start[t] == t, or continues the previous token's), so it is nondecreasing; the kernels rely
// on that to bound the query range of a key tile and do not check it.
//
// Kernels (flash_attention.cu):
// * head_dim 64 and 128: tensor cores (mma.sync m16n8k16 bf16 -> fp32), tiles through shared
//   memory with cp.async. Pointers q k v out dout must be 16-byte aligned (raised otherwise).
//   On a compute capability 9.0 device (H100, H200) of a build that targets sm_90, forward and
//   backward use Hopper's warpgroup products (wgmma) instead, with the same schedules (1.6x the
//   mma.sync kernels there; FERRY_FLASH_WGMMA=0 in the environment keeps the mma.sync ones).
// * any other head_dim <= 256: simple fp32 kernels, one warp per query (forward, dq) or per key
//   (dk, dv); correct but not fast. They also serve as a second, independent oracle on the GPU.
// All pointers are device pointers; the functions enqueue on `stream` (a cudaStream_t, nullptr for
// the legacy default stream) and do not synchronize. Errors (bad shapes, too small a workspace,
// a failed launch) raise ferry::Error.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry {

// Passed by value into the kernels (a POD).
struct FlashAttentionParams {
  const void* q;                    // bf16 (T, Hq, D)
  const void* k;                    // bf16 (T, Hkv, D)
  const void* v;                    // bf16 (T, Hkv, D)
  void* out;                        // bf16 (T, Hq, D), rows out_row_elements() apart
  float* lse;                       // fp32 (Hq, T): natural log-sum-exp of the scaled scores of each query
  const int32_t* doc_start;         // (T): first token of each token's document
  int64_t tokens;                   // T, < 2^31
  int q_heads, kv_heads, head_dim;  // Hq (a multiple of Hkv), Hkv, D in 1..256
  float scale;
  // Heads per token row of out and dout: 0 or q_heads for the plain (T, Hq, D) layout; more for a
  // group of heads' columns of a wider output (ops.h attention_forward), out then pointing at the
  // group's first head.
  int out_heads;
};

// Elements from one token's row of out (and dout) to the next's.
#ifdef __CUDACC__
__host__ __device__
#endif
    inline int64_t
    out_row_elements(const FlashAttentionParams& p) {
  return static_cast<int64_t>(p.out_heads > 0 ? p.out_heads : p.q_heads) * p.head_dim;
}

// out and lse assigned.
void flash_attention_forward(const FlashAttentionParams& params, void* stream);

// The mma.sync forward for head_dim 64 and 128 (what sm_80 and sm_89 run) whatever the device, the
// simple one for other head dims: tests and the bench compare the wgmma kernels with it.
void flash_attention_forward_sm80(const FlashAttentionParams& params, void* stream);

// Whether flash_attention_forward and _backward run the wgmma kernels for `head_dim` on the
// current device, and whether this build has them at all (it targets sm_90).
bool flash_attention_forward_uses_wgmma(int head_dim);
bool flash_attention_wgmma_built();

struct FlashAttentionBackwardParams {
  FlashAttentionParams fwd;  // q k v doc_start and the forward's out and lse (read only here)
  const void* dout;          // bf16 (T, Hq, D), rows out_row_elements() apart (as out's)
  void* dq;                  // bf16 (T, Hq, D), assigned
  void* dk;                  // bf16 (T, Hkv, D), assigned
  void* dv;                  // bf16 (T, Hkv, D), assigned
  void* workspace;           // device memory, 16-byte aligned, flash_attention_backward_workspace bytes
  size_t workspace_bytes;
};

// Bytes of workspace the backward needs: delta = rowsum(dout * out) (Hq, T) fp32 and, for the
// tensor-core path, the fp32 dq accumulator (T, Hq, D).
size_t flash_attention_backward_workspace(int64_t tokens, int q_heads, int kv_heads, int head_dim);

// FlashAttention-2's backward. One block per (kv head, tile of 128 keys, or 64 where shared memory
// is short) recomputes P and dS over the query tiles that see its keys, for every query head of
// the GQA group, and keeps dK, dV in registers; dq is accumulated with fp32 atomics into the
// workspace and converted to bf16 at the end. dk and dv are deterministic; dq is not (the atomics' order
// varies run to run, so its fp32 sums may differ in the last bits before rounding to bf16). The simple path
// (other head_dim) is deterministic throughout.
void flash_attention_backward(const FlashAttentionBackwardParams& params, void* stream);

// The mma.sync backward (sm_80's) whatever the device; as flash_attention_forward_sm80.
void flash_attention_backward_sm80(const FlashAttentionBackwardParams& params, void* stream);

// The simple fp32 kernels for any head_dim <= 256, whatever the tensor-core path would choose:
// the oracle that tests and the bench use at sizes too large for the CPU reference.
void flash_attention_forward_simple(const FlashAttentionParams& params, void* stream);
void flash_attention_backward_simple(const FlashAttentionBackwardParams& params, void* stream);

}  // namespace ferry
