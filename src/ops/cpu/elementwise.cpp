// Elementwise helpers of a training step: add, zero, and the dtype-converting copy.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {

constexpr size_t kGrain = 1 << 15;

bool is_float_dtype(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64;
}

}  // namespace

// out = a + b over the flattened tensors; out may alias a or b (each element is read before it is
// written, by the same thread).
void CpuOps::add(Tensor a, Tensor b, Tensor out) {
  const char* op = "add";
  cpu::expect_f32(op, "a", a);
  cpu::expect_numel(op, "b", b, a.numel());
  cpu::expect_numel(op, "out", out, a.numel());
  const float* as = a.f32();
  const float* bs = b.f32();
  float* os = out.f32();
  ThreadPool::global().parallel_for(
      a.numel(),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) os[i] = as[i] + bs[i];
      },
      kGrain);
}

// Any dtype: all-zero bits are zero in every dtype ferry knows.
void CpuOps::zero(Tensor x) {
  if (x.numel() == 0) return;
  cpu::expect(!x.empty(), "zero", fmt::format("x {} is missing", x.shape_string()));
  auto* bytes = static_cast<unsigned char*>(x.data);
  ThreadPool::global().parallel_for(
      x.bytes(), [&](size_t i0, size_t i1) { std::memset(bytes + i0, 0, i1 - i0); }, size_t{1} << 20);
}

// Same dtype: a byte copy (any dtype). Otherwise both must be float dtypes (F32, BF16, F16, F64);
// values go through fp32 with rounding to nearest even (core/dtype.h). F64 -> BF16/F16 rounds
// twice (to fp32, then down), which is what the rest of ferry's conversions do.
void CpuOps::copy(Tensor src, Tensor dst) {
  const char* op = "copy";
  cpu::expect(!src.empty() || src.numel() == 0, op, "src is missing");
  cpu::expect(!dst.empty() || dst.numel() == 0, op, "dst is missing");
  cpu::expect(
      src.numel() == dst.numel(), op,
      fmt::format("src is {} and dst is {}; element counts differ", src.shape_string(), dst.shape_string()));
  const int64_t n = src.numel();
  if (n == 0) return;
  ThreadPool& pool = ThreadPool::global();
  if (src.dtype == dst.dtype) {
    const size_t es = dtype_size(src.dtype);
    const auto* s = static_cast<const unsigned char*>(src.data);
    auto* d = static_cast<unsigned char*>(dst.data);
    pool.parallel_for(
        n, [&](size_t i0, size_t i1) { std::memcpy(d + i0 * es, s + i0 * es, (i1 - i0) * es); }, kGrain);
    return;
  }
  cpu::expect(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype), op,
              fmt::format("cannot convert {} {} to {}; only F32, BF16, F16 and F64 convert",
                          dtype_name(src.dtype), src.shape_string(), dtype_name(dst.dtype)));
  const size_t ss = dtype_size(src.dtype), ds = dtype_size(dst.dtype);
  const auto* s = static_cast<const unsigned char*>(src.data);
  auto* d = static_cast<unsigned char*>(dst.data);
  pool.parallel_for(
      n,
      [&](size_t i0, size_t i1) {
        if (src.dtype == DType::F32) {
          convert_from_f32(reinterpret_cast<const float*>(s) + i0, dst.dtype, d + i0 * ds, i1 - i0);
        } else if (dst.dtype == DType::F32) {
          convert_to_f32(s + i0 * ss, src.dtype, reinterpret_cast<float*>(d) + i0, i1 - i0);
        } else {
          constexpr size_t kBlock = 4096;
          float tmp[kBlock];
          for (size_t b = i0; b < i1; b += kBlock) {
            const size_t m = std::min(kBlock, i1 - b);
            convert_to_f32(s + b * ss, src.dtype, tmp, m);
            convert_from_f32(tmp, dst.dtype, d + b * ds, m);
          }
        }
      },
      kGrain);
}

}  // namespace ferry
