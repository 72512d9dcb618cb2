// SwiGLU gating on the GPU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) as PyTorch evaluates
// it in fp32; the same formulas as the CPU reference, bf16 in and out, fp32 in between.
// Elementwise over the flattened tensors, 8 elements (16 bytes) per thread when aligned.
#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

template <int VEC>
__global__ void swiglu_forward_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                      bf16* __restrict__ out, int64_t n) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC;
  if (i >= n) return;
  if (i + VEC <= n) {
    float g[VEC], u[VEC];
    cuda::load_bf16<VEC>(gate + i, g);
    cuda::load_bf16<VEC>(up + i, u);
#pragma unroll
    for (int j = 0; j < VEC; ++j) g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    cuda::store_bf16<VEC>(out + i, g);
  } else {
    for (int64_t k = i; k < n; ++k) {
      float g[1], u[1];
      cuda::load_bf16<1>(gate + k, g);
      cuda::load_bf16<1>(up + k, u);
      g[0] = g[0] / (1.0f + expf(-g[0])) * u[0];
      cuda::store_bf16<1>(out + k, g);
    }
  }
}

// dgate = dout * up * sig * (1 + g * (1 - sig)),  dup = dout * silu(g),  out = silu(g) * up (the
// forward kernel's expression, so the same bits); any of the three may be null.
template <int VEC>
__device__ __forceinline__ void swiglu_backward_at(const bf16* gate, const bf16* up, const bf16* dout,
                                                   bf16* dgate, bf16* dup, bf16* out, int64_t i) {
  float g[VEC], u[VEC], d[VEC], dg[VEC], du[VEC], y[VEC];
  cuda::load_bf16<VEC>(gate + i, g);
  cuda::load_bf16<VEC>(up + i, u);
  cuda::load_bf16<VEC>(dout + i, d);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float e = expf(-g[j]);
    const float sig = 1.0f / (1.0f + e);
    dg[j] = d[j] * u[j] * sig * (1.0f + g[j] * (1.0f - sig));
    const float silu = g[j] / (1.0f + e);
    du[j] = d[j] * silu;
    y[j] = silu * u[j];
  }
  if (dgate != nullptr) cuda::store_bf16<VEC>(dgate + i, dg);
  if (dup != nullptr) cuda::store_bf16<VEC>(dup + i, du);
  if (out != nullptr) cuda::store_bf16<VEC>(out + i, y);
}

template <int VEC>
__global__ void swiglu_backward_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                       const bf16* __restrict__ dout, bf16* __restrict__ dgate,
                                       bf16* __restrict__ dup, bf16* __restrict__ out, int64_t n) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC;
  if (i >= n) return;
  if (i + VEC <= n) {
    swiglu_backward_at<VEC>(gate, up, dout, dgate, dup, out, i);
  } else {
    for (int64_t k = i; k < n; ++k) swiglu_backward_at<1>(gate, up, dout, dgate, dup, out, k);
  }
}

bool all_aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p != nullptr && !cuda::aligned16(p)) return false;
  return true;
}

}  // namespace

void CudaOps::swiglu_forward(Tensor gate, Tensor up, Tensor out) {
  const char* op = "swiglu_forward";
  cuda::expect_dtype(op, "gate", gate, DType::BF16);
  cuda::expect_like(op, "up", up, "gate", gate, DType::BF16);
  cuda::expect_like(op, "out", out, "gate", gate, DType::BF16);
  const int64_t n = gate.numel();
  if (n == 0) return;
  const auto* g = static_cast<const bf16*>(gate.data);
  const auto* u = static_cast<const bf16*>(up.data);
  auto* y = static_cast<bf16*>(out.data);
  if (all_aligned16({g, u, y}))
    swiglu_forward_kernel<8>
        <<<cuda::blocks_for((n + 7) / 8, kThreads), kThreads, 0, state_->stream>>>(g, u, y, n);
  else
    swiglu_forward_kernel<1><<<cuda::blocks_for(n, kThreads), kThreads, 0, state_->stream>>>(g, u, y, n);
  CHECK_CUDA_LAUNCH();
}

void CudaOps::swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) {
  const char* op = "swiglu_backward";
  cuda::expect_dtype(op, "gate", gate, DType::BF16);
  cuda::expect_like(op, "up", up, "gate", gate, DType::BF16);
  cuda::expect_like(op, "dout", dout, "gate", gate, DType::BF16);
  if (!dgate.empty()) cuda::expect_like(op, "dgate", dgate, "gate", gate, DType::BF16);
  if (!dup.empty()) cuda::expect_like(op, "dup", dup, "gate", gate, DType::BF16);
  if (!out.empty()) cuda::expect_like(op, "out", out, "gate", gate, DType::BF16);
  const int64_t n = gate.numel();
  if (n == 0 || (dgate.empty() && dup.empty() && out.empty())) return;
  const auto* g = static_cast<const bf16*>(gate.data);
  const auto* u = static_cast<const bf16*>(up.data);
  const auto* d = static_cast<const bf16*>(dout.data);
  auto* dg = static_cast<bf16*>(dgate.data);
  auto* du = static_cast<bf16*>(dup.data);
  auto* y = static_cast<bf16*>(out.data);
  if (all_aligned16({g, u, d, dg, du, y}))
    swiglu_backward_kernel<8>
        <<<cuda::blocks_for((n + 7) / 8, kThreads), kThreads, 0, state_->stream>>>(g, u, d, dg, du, y, n);
  else
    swiglu_backward_kernel<1>
        <<<cuda::blocks_for(n, kThreads), kThreads, 0, state_->stream>>>(g, u, d, dg, du, y, n);
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
