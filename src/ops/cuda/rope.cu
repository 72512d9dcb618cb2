// Rotary position embedding on the GPU, in place, Hugging Face's rotate_half convention (see the
// CPU reference): pairs (x[i], x[i + D/2]) rotated by angle = position * inv_freq[i], the angle an
// fp32 product and cos/sin taken in fp32 (sincosf, full range reduction), inverse = -angle.
//
// One thread per (token, VEC consecutive frequencies): it computes its VEC cos/sin pairs once and
// applies them to every head of the token, so the transcendental work is T * D/2, not T * heads * D/2.
#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;

template <int VEC>
__global__ void rope_kernel(bf16* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t T, int heads, int D, float sign) {
  const int half = D / 2;
  const int chunks = half / VEC;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * chunks) return;
  const int64_t t = i / chunks;
  const int f0 = static_cast<int>(i % chunks) * VEC;
  const float pos = static_cast<float>(positions[t]);
  float cs[VEC], sn[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float s, c;
    sincosf(pos * inv_freq[f0 + j], &s, &c);
    cs[j] = c;
    sn[j] = sign * s;
  }
  bf16* row = x + t * heads * D + f0;
  for (int h = 0; h < heads; ++h, row += D) {
    float a[VEC], b[VEC];
    cuda::load_bf16<VEC>(row, a);
    cuda::load_bf16<VEC>(row + half, b);
    float y1[VEC], y2[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      y1[j] = a[j] * cs[j] - b[j] * sn[j];
      y2[j] = b[j] * cs[j] + a[j] * sn[j];
    }
    cuda::store_bf16<VEC>(row, y1);
    cuda::store_bf16<VEC>(row + half, y2);
  }
}

}  // namespace

// x (T, heads, D) bf16; positions (T) int32 and inv_freq (D/2) fp32, both device pointers.
void CudaOps::rope(Tensor x, const int32_t* positions, const float* inv_freq, bool inverse) {
  const char* op = "rope";
  cuda::expect_dtype(op, "x", x, DType::BF16);
  CUDA_OPS_EXPECT(x.ndim == 3, op, cuda::describe("x", x) + ": expected (T, heads, D)");
  const int64_t T = x.shape[0], heads = x.shape[1], D = x.shape[2];
  CUDA_OPS_EXPECT(D % 2 == 0, op, cuda::describe("x", x) + ": head_dim must be even");
  CUDA_OPS_EXPECT(heads < (int64_t{1} << 30) && D < (int64_t{1} << 30), op,
                  cuda::describe("x", x) + " is too large");
  if (T == 0 || heads == 0 || D == 0) return;
  CUDA_OPS_EXPECT(positions != nullptr && inv_freq != nullptr, op, "positions or inv_freq is null");
  auto* xs = static_cast<bf16*>(x.data);
  const int64_t half = D / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  constexpr int kThreads = 256;
  const auto addr = reinterpret_cast<uintptr_t>(xs);
  if (half % 8 == 0 && addr % 16 == 0) {
    rope_kernel<8><<<cuda::blocks_for(T * (half / 8), kThreads), kThreads, 0, state_->stream>>>(
        xs, positions, inv_freq, T, static_cast<int>(heads), static_cast<int>(D), sign);
  } else if (half % 2 == 0 && addr % 4 == 0) {
    rope_kernel<2><<<cuda::blocks_for(T * (half / 2), kThreads), kThreads, 0, state_->stream>>>(
        xs, positions, inv_freq, T, static_cast<int>(heads), static_cast<int>(D), sign);
  } else {
    rope_kernel<1><<<cuda::blocks_for(T * half, kThreads), kThreads, 0, state_->stream>>>(
        xs, positions, inv_freq, T, static_cast<int>(heads), static_cast<int>(D), sign);
  }
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
