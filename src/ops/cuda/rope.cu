// Rotary position embedding on the GPU, in place, Hugging Face's rotate_half convention (see the
// CPU reference): pairs (x[i], x[i + D/2]) rotated by angle = position * inv_freq[i], the angle an
// fp32 product and cos/sin taken in fp32 (sincosf, full range reduction), inverse = -angle.
//
// One thread per (token, VEC consecutive frequencies): it computes its VEC cos/sin pairs once and
// applies them to every head of the token, so the transcendental work is T * D/2, not T * heads * D/2.
// rope_qkv's threads do the same between the packed rows of one q/k/v product and q, k, v (v's
// heads copied), with the same arithmetic, so both ops give the same bits.
#include <type_traits>
#include <utility>

#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;

// A thread's VEC cos/sin pairs (sin negated for the inverse rotation).
template <int VEC>
__device__ __forceinline__ void token_angles(float pos, const float* __restrict__ inv_freq, int f0,
                                             float sign, float (&cs)[VEC], float (&sn)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float s, c;
    sincosf(pos * inv_freq[f0 + j], &s, &c);
    cs[j] = c;
    sn[j] = sign * s;
  }
}

// VEC pairs of one head from src to dst, rotated (rotate) or copied.
template <int VEC>
__device__ __forceinline__ void rotate_pairs(const bf16* src, bf16* dst, int half, const float (&cs)[VEC],
                                             const float (&sn)[VEC], bool rotate) {
  float a[VEC], b[VEC];
  cuda::load_bf16<VEC>(src, a);
  cuda::load_bf16<VEC>(src + half, b);
  if (rotate) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float y1 = a[j] * cs[j] - b[j] * sn[j];
      b[j] = b[j] * cs[j] + a[j] * sn[j];
      a[j] = y1;
    }
  }
  cuda::store_bf16<VEC>(dst, a);
  cuda::store_bf16<VEC>(dst + half, b);
}

template <int VEC>
__global__ void rope_kernel(bf16* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t T, int heads, int D, float sign) {
  const int half = D / 2;
  const int chunks = half / VEC;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * chunks) return;
  const int64_t t = i / chunks;
  const int f0 = static_cast<int>(i % chunks) * VEC;
  float cs[VEC], sn[VEC];
  token_angles<VEC>(static_cast<float>(positions[t]), inv_freq, f0, sign, cs, sn);
  bf16* row = x + t * heads * D + f0;
  for (int h = 0; h < heads; ++h, row += D) rotate_pairs<VEC>(row, row, half, cs, sn, true);
}

// packed (T, Hq + 2 Hkv, D) <-> q (T, Hq, D), k, v (T, Hkv, D); to_packed: the backward's direction.
template <int VEC>
__global__ void rope_qkv_kernel(bf16* __restrict__ packed, bf16* __restrict__ q, bf16* __restrict__ k,
                                bf16* __restrict__ v, const int32_t* __restrict__ positions,
                                const float* __restrict__ inv_freq, int64_t T, int Hq, int Hkv, int D,
                                float sign, bool to_packed) {
  const int half = D / 2;
  const int chunks = half / VEC;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * chunks) return;
  const int64_t t = i / chunks;
  const int f0 = static_cast<int>(i % chunks) * VEC;
  float cs[VEC], sn[VEC];
  token_angles<VEC>(static_cast<float>(positions[t]), inv_freq, f0, sign, cs, sn);
  bf16* row = packed + t * (Hq + 2 * Hkv) * D + f0;
  const auto move = [&](bf16* other, int heads, bool rotate) {
    for (int h = 0; h < heads; ++h, row += D, other += D) {
      if (to_packed)
        rotate_pairs<VEC>(other, row, half, cs, sn, rotate);
      else
        rotate_pairs<VEC>(row, other, half, cs, sn, rotate);
    }
  };
  move(q + t * Hq * D + f0, Hq, true);
  move(k + t * Hkv * D + f0, Hkv, true);
  move(v + t * Hkv * D + f0, Hkv, false);
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

// qkv (T, Hq + 2 Hkv, D); q (T, Hq, D); k, v (T, Hkv, D); all bf16.
void CudaOps::rope_qkv(Tensor qkv, Tensor q, Tensor k, Tensor v, const int32_t* positions,
                       const float* inv_freq, bool inverse) {
  const char* op = "rope_qkv";
  for (const auto& [name, t] :
       {std::pair{"qkv", qkv}, std::pair{"q", q}, std::pair{"k", k}, std::pair{"v", v}}) {
    cuda::expect_dtype(op, name, t, DType::BF16);
    CUDA_OPS_EXPECT(t.ndim == 3, op, cuda::describe(name, t) + ": expected (T, heads, D)");
  }
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  CUDA_OPS_EXPECT(D % 2 == 0, op, cuda::describe("q", q) + ": head_dim must be even");
  CUDA_OPS_EXPECT(
      cuda::same_shape(k, v) && k.shape[0] == T && k.shape[2] == D, op,
      cuda::describe("k", k) + " and " + cuda::describe("v", v) + " must be (T, Hkv, D) of q's T and D");
  CUDA_OPS_EXPECT(qkv.shape[0] == T && qkv.shape[1] == Hq + 2 * Hkv && qkv.shape[2] == D, op,
                  cuda::describe("qkv", qkv) + ": expected (T, Hq + 2 Hkv, D) of " + cuda::describe("q", q) +
                      " and " + cuda::describe("k", k));
  CUDA_OPS_EXPECT(Hq + 2 * Hkv < (int64_t{1} << 30) && D < (int64_t{1} << 30), op,
                  cuda::describe("qkv", qkv) + " is too large");
  if (T == 0 || D == 0) return;
  CUDA_OPS_EXPECT(positions != nullptr && inv_freq != nullptr, op, "positions or inv_freq is null");
  auto* packed = static_cast<bf16*>(qkv.data);
  auto *qs = static_cast<bf16*>(q.data), *ks = static_cast<bf16*>(k.data), *vs = static_cast<bf16*>(v.data);
  const int64_t half = D / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  constexpr int kThreads = 256;
  const auto all_aligned = [&](uintptr_t bytes) {
    for (const void* p : {static_cast<const void*>(packed), static_cast<const void*>(qs),
                          static_cast<const void*>(ks), static_cast<const void*>(vs)})
      if (reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
    return true;
  };
  const auto launch = [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    rope_qkv_kernel<VEC><<<cuda::blocks_for(T * (half / VEC), kThreads), kThreads, 0, state_->stream>>>(
        packed, qs, ks, vs, positions, inv_freq, T, static_cast<int>(Hq), static_cast<int>(Hkv),
        static_cast<int>(D), sign, inverse);
  };
  if (half % 8 == 0 && all_aligned(16))
    launch(std::integral_constant<int, 8>{});
  else if (half % 2 == 0 && all_aligned(4))
    launch(std::integral_constant<int, 2>{});
  else
    launch(std::integral_constant<int, 1>{});
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
