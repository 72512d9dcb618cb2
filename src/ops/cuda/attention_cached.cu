// Attention of a sequence's newest queries over its key/value cache on the GPU (generation; the
// CPU reference is ops/cpu/attention_cached.cpp). bf16 q, k, v and out; scores, softmax and the
// weighted sum in fp32.
//
// One block per (query, head), kWarps warps. Warp w takes keys w, w + kWarps, ...: its lanes hold
// the head's D components d = lane + 32 i (i < ceil(D/32) <= kMaxPerLane), the score is the warp's
// shuffle-sum of their products, and each warp keeps an online softmax (running max, sum and
// weighted values). The warps' partial results are merged through shared memory at the end. A
// decode step reads the cache once per query head; generation at batch size 1 is bound by reading
// the weights, which the GEMMs do, not by this.
#include <cfloat>

#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kMaxPerLane = 8;  // D <= 256
constexpr int kMaxHeadDim = 32 * kMaxPerLane;

__global__ void attention_cached_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                        const bf16* __restrict__ v, bf16* __restrict__ out, int64_t T,
                                        int64_t S, int Hq, int Hkv, int D, float scale) {
  const int64_t t = blockIdx.x / Hq;
  const int h = static_cast<int>(blockIdx.x % Hq);
  const int kh = h / (Hq / Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t keys = S - T + t + 1;

  float qv[kMaxPerLane], acc[kMaxPerLane];
  const bf16* qr = q + (t * Hq + h) * D;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < D ? __bfloat162float(qr[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = -FLT_MAX, running_sum = 0.0f;
  for (int64_t j = warp; j < keys; j += kWarps) {
    const bf16* kr = k + (j * Hkv + kh) * D;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) dot += qv[i] * __bfloat162float(kr[d]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float score = dot * scale;
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max);
    const float p = expf(score - new_max);
    running_sum = running_sum * correction + p;
    const bf16* vr = v + (j * Hkv + kh) * D;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = acc[i] * correction + p * __bfloat162float(vr[d]);
    }
    running_max = new_max;
  }

  // Merge the warps: out = sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) l_w. A warp that saw no
  // key (keys < kWarps) has l = 0 and acc = 0, and adds nothing.
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float warp_acc[kWarps][kMaxHeadDim];
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < D) warp_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float block_max = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w]);
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += warp_sum[w] * expf(warp_max[w] - block_max);
  bf16* o = out + (t * Hq + h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) sum += warp_acc[w][d] * expf(warp_max[w] - block_max);
    o[d] = __float2bfloat16_rn(sum / total);
  }
}

}  // namespace

// q (T,Hq,D); k, v (S,Hkv,D), S >= T; out (T,Hq,D); all bf16 device memory.
void CudaOps::attention_cached(Tensor q, Tensor k, Tensor v, float scale, Tensor out) {
  const char* op = "attention_cached";
  cuda::expect_dtype(op, "q", q, DType::BF16);
  cuda::expect_dtype(op, "k", k, DType::BF16);
  cuda::expect_dtype(op, "v", v, DType::BF16);
  cuda::expect_like(op, "out", out, "q", q, DType::BF16);
  CUDA_OPS_EXPECT(
      q.ndim == 3 && k.ndim == 3, op,
      cuda::describe("q", q) + ", " + cuda::describe("k", k) + ": expected (T, Hq, D) and (S, Hkv, D)");
  CUDA_OPS_EXPECT(cuda::same_shape(k, v), op, cuda::describe("k", k) + " and v differ");
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], S = k.shape[0], Hkv = k.shape[1];
  CUDA_OPS_EXPECT(k.shape[2] == D, op, "q and k have different head dims");
  CUDA_OPS_EXPECT(S >= T, op, "the cache holds fewer tokens than there are queries");
  CUDA_OPS_EXPECT(Hkv > 0 && Hq % Hkv == 0, op, "query heads must be a multiple of kv heads");
  CUDA_OPS_EXPECT(D <= kMaxHeadDim, op,
                  "head_dim above " + std::to_string(kMaxHeadDim) + " is not supported");
  if (T == 0 || Hq == 0 || D == 0) return;
  const int64_t blocks = T * Hq;
  CUDA_OPS_EXPECT(blocks < (int64_t{1} << 31), op, "too many (query, head) rows for one launch");
  attention_cached_kernel<<<static_cast<unsigned int>(blocks), kWarps * 32, 0, state_->stream>>>(
      static_cast<const bf16*>(q.data), static_cast<const bf16*>(k.data), static_cast<const bf16*>(v.data),
      static_cast<bf16*>(out.data), T, S, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D),
      scale);
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
