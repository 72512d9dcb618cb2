// Elementwise helpers on the GPU: add, zero, and the dtype-converting copy.
#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// 16-bit float types as raw bits (loaded 8 at a time as one 16-byte access).
template <typename T>
struct Half16;
template <>
struct Half16<bf16> {
  __device__ static float to(unsigned short b) { return cuda::bf16_bits_to_float(b); }
  __device__ static unsigned short from(float x) { return cuda::float_to_bf16_bits(x); }
};
template <>
struct Half16<__half> {
  __device__ static float to(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  __device__ static unsigned short from(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

// out = a + b for 16-bit types; out may alias a or b (each element is read before it is written,
// by the same thread).
template <typename T>
__global__ void add16_kernel(const unsigned short* a, const unsigned short* b, unsigned short* out, int64_t n,
                             bool vec) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (i >= n) return;
  if (vec && i + 8 <= n) {
    cuda::Bf16Pack<8> pa, pb, po;
    pa.raw = *reinterpret_cast<const uint4*>(a + i);
    pb.raw = *reinterpret_cast<const uint4*>(b + i);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      po.bits[j] = Half16<T>::from(Half16<T>::to(pa.bits[j]) + Half16<T>::to(pb.bits[j]));
    *reinterpret_cast<uint4*>(out + i) = po.raw;
  } else {
    const int64_t end = i + 8 < n ? i + 8 : n;
    for (int64_t k = i; k < end; ++k) out[k] = Half16<T>::from(Half16<T>::to(a[k]) + Half16<T>::to(b[k]));
  }
}

__global__ void add_f32_kernel(const float* a, const float* b, float* out, int64_t n, bool vec) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 4;
  if (i >= n) return;
  if (vec && i + 4 <= n) {
    const float4 x = *reinterpret_cast<const float4*>(a + i);
    const float4 y = *reinterpret_cast<const float4*>(b + i);
    *reinterpret_cast<float4*>(out + i) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  } else {
    const int64_t end = i + 4 < n ? i + 4 : n;
    for (int64_t k = i; k < end; ++k) out[k] = a[k] + b[k];
  }
}

// dst = src converted through fp32 (F64 -> BF16/F16 rounds twice, as the CPU backend does).
template <typename Src, typename Dst>
__global__ void convert_kernel(const Src* __restrict__ src, Dst* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    dst[i] = cuda::from_float<Dst>(cuda::to_float(src[i]));
}

template <typename Src>
void convert_from(const void* src, void* dst, DType to, int64_t n, unsigned int blocks, cudaStream_t stream) {
  const auto* s = static_cast<const Src*>(src);
  switch (to) {
    case DType::F32:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<float*>(dst), n);
      break;
    case DType::BF16:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<bf16*>(dst), n);
      break;
    case DType::F16:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<__half*>(dst), n);
      break;
    case DType::F64:
      convert_kernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<double*>(dst), n);
      break;
    default:
      FERRY_ASSERT(false, "unreachable: checked by the caller");
  }
}

bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

}  // namespace

// F32, BF16 or F16, all three tensors of one dtype; computed in fp32, rounded once.
void CudaOps::add(Tensor a, Tensor b, Tensor out) {
  const char* op = "add";
  CUDA_OPS_EXPECT(a.dtype == DType::F32 || a.dtype == DType::BF16 || a.dtype == DType::F16, op,
                  cuda::describe("a", a) + ": add takes F32, BF16 or F16");
  CUDA_OPS_EXPECT(b.dtype == a.dtype && out.dtype == a.dtype, op,
                  cuda::describe("a", a) + ", " + cuda::describe("b", b) + " and " +
                      cuda::describe("out", out) + " must have one dtype");
  const int64_t n = a.numel();
  CUDA_OPS_EXPECT(b.numel() == n && out.numel() == n, op,
                  cuda::describe("a", a) + ", " + cuda::describe("b", b) + " and " +
                      cuda::describe("out", out) + " must have the same element count");
  if (n == 0) return;
  CUDA_OPS_EXPECT(!a.empty() && !b.empty() && !out.empty(), op, "a tensor is missing");
  const bool vec = cuda::aligned16(a.data) && cuda::aligned16(b.data) && cuda::aligned16(out.data);
  cudaStream_t stream = state_->stream;
  if (a.dtype == DType::F32) {
    add_f32_kernel<<<cuda::blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(
        static_cast<const float*>(a.data), static_cast<const float*>(b.data), static_cast<float*>(out.data),
        n, vec);
  } else {
    const auto* pa = static_cast<const unsigned short*>(a.data);
    const auto* pb = static_cast<const unsigned short*>(b.data);
    auto* po = static_cast<unsigned short*>(out.data);
    const unsigned int blocks = cuda::blocks_for((n + 7) / 8, kThreads);
    if (a.dtype == DType::BF16)
      add16_kernel<bf16><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n, vec);
    else
      add16_kernel<__half><<<blocks, kThreads, 0, stream>>>(pa, pb, po, n, vec);
  }
  CHECK_CUDA_LAUNCH();
}

// Any dtype: all-zero bits are zero in every dtype ferry knows.
void CudaOps::zero(Tensor x) {
  if (x.numel() == 0) return;
  CUDA_OPS_EXPECT(!x.empty(), "zero", cuda::describe("x", x) + " is missing");
  FERRY_CUDA_CHECK(cudaMemsetAsync(x.data, 0, x.bytes(), state_->stream));
}

// Same dtype: a byte copy (any dtype). Otherwise F32, BF16, F16 and F64 convert through fp32 with
// rounding to nearest even, as the CPU backend does.
void CudaOps::copy(Tensor src, Tensor dst) {
  const char* op = "copy";
  CUDA_OPS_EXPECT(
      src.numel() == dst.numel(), op,
      cuda::describe("src", src) + " and " + cuda::describe("dst", dst) + ": element counts differ");
  const int64_t n = src.numel();
  if (n == 0) return;
  CUDA_OPS_EXPECT(!src.empty() && !dst.empty(), op, "src or dst is missing");
  cudaStream_t stream = state_->stream;
  if (src.dtype == dst.dtype) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream));
    return;
  }
  CUDA_OPS_EXPECT(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype), op,
                  "cannot convert " + cuda::describe("src", src) + " to " +
                      std::string(dtype_name(dst.dtype)) + "; only F32, BF16, F16 and F64 convert");
  const int64_t per_block = int64_t{kThreads} * 4;
  const int64_t b = (n + per_block - 1) / per_block;
  const unsigned int blocks = static_cast<unsigned int>(b < 65536 ? b : 65536);
  switch (src.dtype) {
    case DType::F32:
      convert_from<float>(src.data, dst.data, dst.dtype, n, blocks, stream);
      break;
    case DType::BF16:
      convert_from<bf16>(src.data, dst.data, dst.dtype, n, blocks, stream);
      break;
    case DType::F16:
      convert_from<__half>(src.data, dst.data, dst.dtype, n, blocks, stream);
      break;
    case DType::F64:
      convert_from<double>(src.data, dst.data, dst.dtype, n, blocks, stream);
      break;
    default:
      FERRY_ASSERT(false, "unreachable: checked above");
  }
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
