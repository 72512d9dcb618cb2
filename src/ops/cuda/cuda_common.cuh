// Helpers shared by the CUDA ops (.cu files of src/ops/cuda only; never included by plain C++):
// the error check, RAII for CUDA handles, shape/dtype expectations, and bf16 vector loads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace ferry::cuda {

// ---------------------------------------------------------------------------------------------
// Errors. A failing CUDA runtime call throws through FERRY_CUDA_CHECK (core/cuda_check.h); this
// one reports the other libraries' failures (cuBLASLt) the same way.

[[noreturn]] inline void raise_cuda_error(const char* what, const char* call, const char* file, int line) {
  raise("cuda", std::string(call) + " failed: " + what + " (" + file + ":" + std::to_string(line) + ")");
}

}  // namespace ferry::cuda

// After every kernel launch: a bad configuration is reported here, at the launch, not later.
#define CHECK_CUDA_LAUNCH() FERRY_CUDA_CHECK(cudaGetLastError())

// Shape and dtype invariants: a failure is a bug in ferry's model code (wrong views), so it aborts
// like FERRY_ASSERT, with a message naming the op and the shapes.
#define CUDA_OPS_EXPECT(condition, op, message)                                                      \
  do {                                                                                               \
    if (!(condition))                                                                                \
      ::ferry::assertion_failed(#condition, __FILE__, __LINE__, std::string(op) + ": " + (message)); \
  } while (0)

namespace ferry::cuda {

// ---------------------------------------------------------------------------------------------
// RAII: one owner per CUDA resource. The destructor never throws; a failed destroy is ignored
// (there is nothing sensible to do with it while unwinding).

template <typename Handle, typename Destroy>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(Handle handle) : handle_(handle) {}
  ~CudaHandle() { reset(); }
  CudaHandle(CudaHandle&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  CudaHandle& operator=(CudaHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }
  void reset(Handle handle = Handle{}) {
    if (handle_ != Handle{}) Destroy{}(handle_);
    handle_ = handle;
  }

 private:
  Handle handle_{};
};

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceMemory = CudaHandle<void*, DeviceFree>;

// Allocates `bytes` of device memory (cudaMalloc: for buffers made once, at construction).
inline DeviceMemory device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess)
    raise("cuda", std::string("cannot allocate ") + std::to_string(bytes) + " bytes of device memory for " +
                      what + ": " + cudaGetErrorString(status));
  return DeviceMemory(p);
}

// A grow-only device buffer. Without an allocator its memory is allocated and freed in stream
// order (cudaMallocAsync / cudaFreeAsync), so growing it never blocks the host: the old buffer is
// released once the work already queued on the stream is done with it. With a device's allocator
// (WorkspaceAllocator) the device's budget counts it; growing then waits for the stream before it
// gives the old buffer back -- it happens in the first step only, as the shapes repeat after.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  ~StreamBuffer() { free(); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  void use_allocator(const WorkspaceAllocator* allocator) { allocator_ = allocator; }

  // At least `bytes` bytes (256-byte aligned), valid for work issued to `stream` from now on.
  void* get(size_t bytes, cudaStream_t stream, const char* what) {
    if (bytes <= capacity_ && data_ != nullptr) return data_;
    free();
    stream_ = stream;
    const size_t rounded = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
    if (allocator_ != nullptr && *allocator_) {
      data_ = allocator_->allocate(rounded, what);
    } else {
      void* p = nullptr;
      const cudaError_t status = cudaMallocAsync(&p, rounded, stream);
      if (status != cudaSuccess)
        raise("cuda", std::string("cannot allocate ") + std::to_string(rounded) +
                          " bytes of working memory for " + what + ": " + cudaGetErrorString(status));
      data_ = p;
    }
    capacity_ = rounded;
    return data_;
  }
  size_t capacity() const { return capacity_; }

 private:
  void free() {
    if (data_ == nullptr) return;
    if (allocator_ != nullptr && *allocator_) {
      cudaStreamSynchronize(stream_);  // work queued on the stream may still read it
      allocator_->release(data_);
    } else {
      cudaFreeAsync(data_, stream_);
    }
    data_ = nullptr;
    capacity_ = 0;
  }

  const WorkspaceAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Shapes and dtypes (host side).

inline std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + std::string(dtype_name(t.dtype)) + t.shape_string();
}

inline bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

inline void expect_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  CUDA_OPS_EXPECT(!t.empty() || t.numel() == 0, op, std::string(name) + " is missing");
  CUDA_OPS_EXPECT(t.dtype == dtype, op,
                  describe(name, t) + " has the wrong dtype; expected " + std::string(dtype_name(dtype)));
}

// A present tensor of `dtype` seen as a matrix (rows, cols): returns rows.
inline int64_t expect_matrix(const char* op, const char* name, const Tensor& t, int64_t cols, DType dtype) {
  expect_dtype(op, name, t, dtype);
  CUDA_OPS_EXPECT(t.ndim >= 1 && t.dim(-1) == cols, op,
                  describe(name, t) + ": expected a last dim of " + std::to_string(cols));
  return cols == 0 ? 0 : t.numel() / cols;
}

inline void expect_like(const char* op, const char* name, const Tensor& t, const char* ref_name,
                        const Tensor& ref, DType dtype) {
  expect_dtype(op, name, t, dtype);
  CUDA_OPS_EXPECT(same_shape(t, ref), op,
                  describe(name, t) + " and " + describe(ref_name, ref) + " must have the same shape");
}

// The addend of a fused add (ops.h): `dtype`, as many elements as `out`, and either `out` itself
// (read in place) or disjoint from it.
inline void expect_addend(const char* op, const char* name, const Tensor& addend, const char* out_name,
                          const Tensor& out, DType dtype) {
  expect_dtype(op, name, addend, dtype);
  CUDA_OPS_EXPECT(addend.numel() == out.numel(), op,
                  describe(name, addend) + " and " + describe(out_name, out) + " must have as many elements");
  const auto* a = static_cast<const unsigned char*>(addend.data);
  const auto* o = static_cast<const unsigned char*>(out.data);
  CUDA_OPS_EXPECT(a == o || a + addend.bytes() <= o || o + out.bytes() <= a, op,
                  describe(name, addend) + " overlaps " + describe(out_name, out) + " without being it");
}

// Parameter gradients are F32 (resident training) or BF16 (streamed units).
inline void expect_grad_dtype(const char* op, const char* name, const Tensor& t) {
  CUDA_OPS_EXPECT(t.dtype == DType::F32 || t.dtype == DType::BF16, op,
                  describe(name, t) + ": parameter gradients must be F32 or BF16");
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

inline unsigned int blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<unsigned int>(b < 1 ? 1 : b);
}

inline int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Device helpers: bf16 values as raw bits, loaded N at a time (N = 8 is one 16-byte access).

__device__ __forceinline__ float bf16_bits_to_float(unsigned short bits) {
  return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}
// Round to nearest even, as core/dtype.h's f32_to_bf16 (NaN stays NaN).
__device__ __forceinline__ unsigned short float_to_bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

template <int N>
struct RawOf;
template <>
struct RawOf<8> {
  using type = uint4;
};
template <>
struct RawOf<4> {
  using type = uint2;
};
template <>
struct RawOf<2> {
  using type = unsigned int;
};
template <>
struct RawOf<1> {
  using type = unsigned short;
};

template <int N>
union Bf16Pack {
  typename RawOf<N>::type raw;
  unsigned short bits[N];
};

// The N bf16 values packed in raw (as load_bf16 reads them) as floats: for a kernel that keeps the
// packed values in registers and unpacks them where it uses them.
template <int N>
__device__ __forceinline__ void unpack_bf16(const typename RawOf<N>::type& raw, float (&v)[N]) {
  Bf16Pack<N> pack;
  pack.raw = raw;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = bf16_bits_to_float(pack.bits[i]);
}

// Loads N bf16 values at p (aligned to 2N bytes) as floats.
template <int N>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* p, float (&v)[N]) {
  unpack_bf16<N>(*reinterpret_cast<const typename RawOf<N>::type*>(p), v);
}

template <int N>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, const float (&v)[N]) {
  Bf16Pack<N> pack;
#pragma unroll
  for (int i = 0; i < N; ++i) pack.bits[i] = float_to_bf16_bits(v[i]);
  *reinterpret_cast<typename RawOf<N>::type*>(p) = pack.raw;
}

// Scalar conversions for the dtype-generic kernels.
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
// F64 -> F32 rounds to nearest, as the CPU's static_cast does.
__device__ __forceinline__ float to_float(double x) {
  return __double2float_rn(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ double from_float<double>(float x) {
  return static_cast<double>(x);
}

// Sum over a group of G consecutive lanes of a warp (G a power of two <= 32). Every lane of the
// warp must call it (the full mask), whatever its group does.
template <int G>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset, G);
  return x;
}

}  // namespace ferry::cuda
