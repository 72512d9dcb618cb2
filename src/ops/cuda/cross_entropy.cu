// Fused lm_head + cross-entropy on the GPU. The (T,V) logits never exist whole: tokens are taken a
// chunk at a time (CudaOps::flce_chunk_tokens, about options.flce_chunk_bytes of bf16 logits), and
// per chunk
//   1. logits (n,V) = x_chunk @ w^T          cuBLASLt, fp32 accumulation, bf16 logits (as the
//                                            bf16 lm_head of transformers produces them)
//   2. one block per row: max and sum of exp in fp32 (online), loss = lse - logit[target] into a
//      per-token fp32 buffer, and, when gradients are asked, the row is overwritten in place with
//      dlogits = grad_scale * (softmax - onehot) (bf16); ignored rows (-100) get 0
//   3. dx_chunk (n,H) = dlogits @ w           (assigned)
//      dw (V,H)      += dlogits^T @ x_group   (beta = 1, F32 or BF16 gradient)
//      where a group is weight_grad_chunks consecutive chunks, whose dlogits lie one after another
//      in the buffer: the product runs once per group, over its tokens, so the gradient is read and
//      written once per group instead of once per chunk
// and at the end one block adds the per-token losses in a fixed order (double) to loss_sum, so
// the result is deterministic and the host never waits.
//
// The logits rows are padded to Vp = V rounded up to 8 so every row starts 16-byte aligned.
#include <algorithm>
#include <cmath>

#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kRowThreads = 256;

__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float M = fmaxf(m, m2);
  // Equal maxima (including both -inf, where exp(-inf - -inf) would be NaN) keep their sums as is.
  const float a = m == M ? s : s * expf(m - M);
  const float b = m2 == M ? s2 : s2 * expf(m2 - M);
  m = M;
  s = a + b;
}

// One block per row of the chunk. logits rows are `ld` apart (ld % 8 == 0, 16-byte aligned).
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_rows_kernel(bf16* __restrict__ logits, int64_t ld, int64_t V,
                              const int32_t* __restrict__ targets, float grad_scale, bool want_grad,
                              float* __restrict__ row_loss, int* error_flag) {
  const int64_t r = blockIdx.x;
  bf16* row = logits + r * ld;
  const int32_t target = targets[r];
  const int64_t chunks = ld / 8;
  const int tid = threadIdx.x;

  if (target == kIgnoreIndex || target < 0 || target >= V) {
    if (tid == 0) {
      const bool ignored = target == kIgnoreIndex;
      if (!ignored) atomicOr(error_flag, cuda::kBadTarget);
      if (row_loss != nullptr) row_loss[r] = ignored ? 0.0f : __int_as_float(0x7fc00000);
    }
    if (want_grad) {
      for (int64_t c = tid; c < chunks; c += kRowThreads)
        *reinterpret_cast<uint4*>(row + c * 8) = make_uint4(0, 0, 0, 0);
    }
    return;
  }

  // Pass 1: running max and sum of exp per thread, then over the block in a fixed tree.
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = tid; c < chunks; c += kRowThreads) {
    float v[8];
    cuda::load_bf16<8>(row + c * 8, v);
    float cm = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (c * 8 + j >= V) v[j] = -INFINITY;  // padding
      cm = fmaxf(cm, v[j]);
    }
    if (cm > m) {
      s = m == -INFINITY ? 0.0f : s * expf(m - cm);
      m = cm;
    }
    if (m != -INFINITY) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s += expf(v[j] - m);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2);
  }
  __shared__ float warp_m[kRowThreads / 32], warp_s[kRowThreads / 32];
  __shared__ float row_m, row_s;
  if (tid % 32 == 0) {
    warp_m[tid / 32] = m;
    warp_s[tid / 32] = s;
  }
  __syncthreads();
  if (tid == 0) {
    float M = warp_m[0], S = warp_s[0];
    for (int w = 1; w < kRowThreads / 32; ++w) combine(M, S, warp_m[w], warp_s[w]);
    row_m = M;
    row_s = S;
    if (row_loss != nullptr) {
      const float logit = cuda::bf16_bits_to_float(__bfloat16_as_ushort(row[target]));
      row_loss[r] = (M + logf(S)) - logit;
    }
  }
  __syncthreads();
  if (!want_grad) return;

  // Pass 2: dlogits = softmax * grad_scale - grad_scale * onehot, as the CPU reference forms it.
  const float M = row_m;
  const float c_scale = grad_scale / row_s;
  for (int64_t c = tid; c < chunks; c += kRowThreads) {
    float v[8];
    cuda::load_bf16<8>(row + c * 8, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t idx = c * 8 + j;
      float d = idx < V ? expf(v[j] - M) * c_scale : 0.0f;
      if (idx == target) d -= grad_scale;
      v[j] = d;
    }
    cuda::store_bf16<8>(row + c * 8, v);
  }
}

// logits_out rows [t0, t0 + n) (V wide, F32 or BF16) = the chunk's bf16 logits (ld wide).
template <typename Out>
__global__ void copy_logits_kernel(const bf16* __restrict__ chunk, int64_t ld, int64_t n, int64_t V,
                                   Out* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * V; i += stride) {
    const int64_t r = i / V, c = i % V;
    out[i] = cuda::from_float<Out>(__bfloat162float(chunk[r * ld + c]));
  }
}

// loss_sum[0] += sum of row_loss[0..T) in double, in a fixed order (one block).
constexpr int kSumThreads = 512;
__global__ void __launch_bounds__(kSumThreads)
    sum_losses_kernel(const float* __restrict__ row_loss, int64_t T, float* __restrict__ loss_sum) {
  __shared__ double part[kSumThreads];
  double s = 0.0;
  for (int64_t t = threadIdx.x; t < T; t += kSumThreads) s += static_cast<double>(row_loss[t]);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int width = kSumThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) part[threadIdx.x] += part[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss_sum[0] += static_cast<float>(part[0]);
}

}  // namespace

int64_t CudaOps::flce_chunk_tokens(int64_t V) const {
  return fused_cross_entropy_chunk_tokens(options_.flce_chunk_bytes, V);
}

void CudaOps::linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                   Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) {
  const char* op = "linear_cross_entropy";
  CUDA_OPS_EXPECT(weight_grad_chunks >= 1, op,
                  "weight_grad_chunks is " + std::to_string(weight_grad_chunks) + ", expected at least 1");
  cuda::expect_dtype(op, "w", w, DType::BF16);
  CUDA_OPS_EXPECT(w.ndim == 2, op, cuda::describe("w", w) + ": expected (V, H)");
  const int64_t V = w.shape[0], H = w.shape[1];
  const int64_t T = cuda::expect_matrix(op, "x", x, H, DType::BF16);
  if (!dx.empty()) cuda::expect_like(op, "dx", dx, "x", x, DType::BF16);
  if (!dw.empty()) {
    cuda::expect_grad_dtype(op, "dw", dw);
    CUDA_OPS_EXPECT(cuda::same_shape(dw, w), op,
                    cuda::describe("dw", dw) + " must have the shape of " + cuda::describe("w", w));
  }
  if (!loss_sum.empty()) {
    cuda::expect_dtype(op, "loss_sum", loss_sum, DType::F32);
    CUDA_OPS_EXPECT(loss_sum.numel() == 1, op,
                    cuda::describe("loss_sum", loss_sum) + ": expected one element");
  }
  if (!logits.empty()) {
    CUDA_OPS_EXPECT(logits.dtype == DType::F32 || logits.dtype == DType::BF16, op,
                    cuda::describe("logits", logits) + ": F32 or BF16");
    CUDA_OPS_EXPECT(cuda::expect_matrix(op, "logits", logits, V, logits.dtype) == T, op,
                    cuda::describe("logits", logits) + ": expected (" + std::to_string(T) + ", " +
                        std::to_string(V) + ")");
  }
  if (T == 0) return;
  CUDA_OPS_EXPECT(targets != nullptr, op, "targets is null");
  CUDA_OPS_EXPECT(V > 0, op, cuda::describe("w", w) + ": the vocabulary is empty");
  CUDA_OPS_EXPECT(V < (int64_t{1} << 31), op, cuda::describe("w", w) + ": the vocabulary is too large");

  cudaStream_t stream = state_->stream;
  const bool want_grad = !dx.empty() || !dw.empty();
  const int64_t Vp = (V + 7) / 8 * 8;
  const int64_t C = std::min<int64_t>(T, flce_chunk_tokens(V));
  // Chunks grouped for dw's product; without dw, one chunk's logits are all that is held.
  const int64_t group = dw.empty() || H == 0 ? 1 : weight_grad_chunks;
  const int64_t rows = fused_cross_entropy_logits_rows(options_.flce_chunk_bytes, V, T, group);
  auto* buf = static_cast<bf16*>(state_->buffer(
      cuda::Scratch::kLogits, sizeof(bf16) * static_cast<size_t>(rows * Vp), "the cross-entropy's logits"));
  float* row_loss = nullptr;
  if (!loss_sum.empty())
    row_loss = static_cast<float*>(state_->buffer(
        cuda::Scratch::kRowLoss, sizeof(float) * static_cast<size_t>(T), "the per-token losses"));
  const auto* xs = static_cast<const bf16*>(x.data);

  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int64_t n = std::min(C, T - t0);
    const bf16* xc = xs + t0 * H;
    // The chunk's place in its group: its logits, then its dlogits, follow the group's earlier ones.
    const int64_t place = (t0 / C) % group;
    bf16* chunk = buf + place * C * Vp;
    if (H > 0) {
      cuda::MatmulArgs a;  // logits^T (V,n) = op_T(w: H x V) * x_chunk^T (H x n)
      a.trans_a = true;
      a.m = V;
      a.n = n;
      a.k = H;
      a.a = w.data;
      a.lda = H;
      a.b = xc;
      a.ldb = H;
      a.d = chunk;
      a.ldd = Vp;
      state_->gemm.matmul(a, stream);
    } else {
      FERRY_CUDA_CHECK(cudaMemsetAsync(chunk, 0, sizeof(bf16) * static_cast<size_t>(n * Vp), stream));
    }
    if (!logits.empty()) {
      const int64_t blocks = std::min<int64_t>((n * V + 255) / 256, 65536);
      if (logits.dtype == DType::F32)
        copy_logits_kernel<<<static_cast<unsigned int>(blocks), 256, 0, stream>>>(
            chunk, Vp, n, V, static_cast<float*>(logits.data) + t0 * V);
      else
        copy_logits_kernel<<<static_cast<unsigned int>(blocks), 256, 0, stream>>>(
            chunk, Vp, n, V, static_cast<bf16*>(logits.data) + t0 * V);
      CHECK_CUDA_LAUNCH();
    }
    cross_entropy_rows_kernel<<<static_cast<unsigned int>(n), kRowThreads, 0, stream>>>(
        chunk, Vp, V, targets + t0, grad_scale, want_grad, row_loss == nullptr ? nullptr : row_loss + t0,
        state_->error_flag_ptr());
    CHECK_CUDA_LAUNCH();
    if (!want_grad || H == 0) continue;

    if (!dx.empty()) {
      cuda::MatmulArgs a;  // dx_chunk^T (H,n) = w (H x V) * dlogits^T (V x n)
      a.m = H;
      a.n = n;
      a.k = V;
      a.a = w.data;
      a.lda = H;
      a.b = chunk;
      a.ldb = Vp;
      a.d = static_cast<bf16*>(dx.data) + t0 * H;
      a.ldd = H;
      state_->gemm.matmul(a, stream);
    }
    const bool group_ends = place == group - 1 || t0 + n == T;
    if (!dw.empty() && group_ends) {
      const int64_t g0 = t0 - place * C, k = t0 + n - g0;  // the group's first token, its tokens
      cuda::MatmulArgs a;  // dw^T (H,V) += x_group^T (H x k) * op_T(dlogits^T: V x k)
      a.trans_b = true;
      a.m = H;
      a.n = V;
      a.k = k;
      a.a = xs + g0 * H;
      a.lda = H;
      a.b = buf;
      a.ldb = Vp;
      a.d = dw.data;
      a.d_type = cuda::lt_type(dw.dtype);
      a.ldd = H;
      a.beta = 1.0f;
      state_->gemm.matmul(a, stream);
    }
  }
  if (row_loss != nullptr) {
    sum_losses_kernel<<<1, kSumThreads, 0, stream>>>(row_loss, T, static_cast<float*>(loss_sum.data));
    CHECK_CUDA_LAUNCH();
  }
}

}  // namespace ferry
