// Helpers of the CUDA parity tests (tests/ops_cuda_*_gpu_test.cpp): device tensors with guard
// regions, bf16 rounding of host data, and an elementwise comparison against per-element bounds.
// Only for builds with CUDA (FERRY_HAVE_CUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ferry::cudatest {

using Vec = std::vector<float>;

// bf16: 8 significant bits, round to nearest: unit roundoff u = 2^-8 (one ulp at 1 is 2^-7).
constexpr double kBf16U = 1.0 / 256;
// fp16: 11 significant bits.
constexpr double kF16U = 1.0 / 2048;
// fp32: 24 significant bits.
constexpr double kF32U = 1.0 / (1 << 24);

inline std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    const cudaError_t e_ = (call);                                                      \
    ASSERT_EQ(e_, cudaSuccess) << #call << " -> " << ::ferry::cudatest::cuda_error(e_); \
  } while (0)

inline bool gpu_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *why = e != cudaSuccess ? "cudaGetDeviceCount: " + cuda_error(e) : "no CUDA device";
    return false;
  }
  return true;
}

// Uniform values in [lo, hi) from a fixed seed.
inline Vec uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Rounds every value to the nearest bf16 (in place): the values the GPU and the CPU both get.
inline Vec& round_bf16(Vec& v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
inline Vec& round_to(Vec& v, DType dtype) {
  if (dtype == DType::BF16) return round_bf16(v);
  if (dtype == DType::F16)
    for (float& x : v) x = f16_to_f32(f32_to_f16(x));
  return v;
}

inline Vec abs_of(const Vec& v) {
  Vec a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

// A device allocation of `count` elements of `dtype`, `offset` elements past a 256-byte aligned
// start (offset > 0 makes a misaligned view), with kGuard bytes of 0xa5 on both sides. The data
// starts as 0xff bytes (NaN in bf16, fp16 and fp32), so an element an op forgets stays NaN and
// fails. guards() says whether anything wrote outside.
class DeviceTensor {
 public:
  static constexpr size_t kGuard = 256;
  DeviceTensor(DType dtype, std::vector<int64_t> dims, size_t offset = 0)
      : dtype_(dtype), dims_(std::move(dims)) {
    count_ = 1;
    for (int64_t d : dims_) count_ *= static_cast<size_t>(d);
    esize_ = dtype_size(dtype);
    lead_ = kGuard + offset * esize_;
    total_ = lead_ + count_ * esize_ + kGuard;
    if (cudaMalloc(&base_, total_) != cudaSuccess) {
      base_ = nullptr;
      return;
    }
    cudaMemset(base_, 0xa5, total_);
    cudaMemset(data(), 0xff, bytes());
  }
  ~DeviceTensor() {
    if (base_) cudaFree(base_);
  }
  DeviceTensor(DeviceTensor&& o) noexcept
      : dtype_(o.dtype_),
        dims_(std::move(o.dims_)),
        count_(o.count_),
        esize_(o.esize_),
        lead_(o.lead_),
        total_(o.total_),
        base_(std::exchange(o.base_, nullptr)) {}
  DeviceTensor& operator=(DeviceTensor&&) = delete;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  bool ok() const { return base_ != nullptr; }
  void* data() const { return static_cast<char*>(base_) + lead_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * esize_; }
  DType dtype() const { return dtype_; }
  Tensor view() const {
    Tensor t(data(), dtype_, {});
    for (int64_t d : dims_) t.shape[t.ndim++] = d;
    return t;
  }

  // Converts `host` (fp32) to the tensor's dtype, rounding to nearest even, and uploads it.
  void upload(const Vec& host) const {
    EXPECT_EQ(host.size(), count_);
    std::vector<unsigned char> raw(bytes());
    convert_from_f32(host.data(), dtype_, raw.data(), count_);
    cudaMemcpy(data(), raw.data(), bytes(), cudaMemcpyHostToDevice);
  }
  void upload_raw(const void* host) const { cudaMemcpy(data(), host, bytes(), cudaMemcpyHostToDevice); }
  // The contents as fp32 (exact for F32, BF16, F16).
  Vec download() const {
    std::vector<unsigned char> raw(bytes());
    cudaDeviceSynchronize();
    cudaMemcpy(raw.data(), data(), bytes(), cudaMemcpyDeviceToHost);
    Vec out(count_);
    convert_to_f32(raw.data(), dtype_, out.data(), count_);
    return out;
  }
  std::vector<unsigned char> download_raw() const {
    std::vector<unsigned char> raw(bytes());
    cudaDeviceSynchronize();
    cudaMemcpy(raw.data(), data(), bytes(), cudaMemcpyDeviceToHost);
    return raw;
  }
  // True when the guard bytes on both sides are intact.
  bool guards() const {
    std::vector<unsigned char> before(lead_), after(kGuard);
    cudaDeviceSynchronize();
    cudaMemcpy(before.data(), base_, lead_, cudaMemcpyDeviceToHost);
    cudaMemcpy(after.data(), static_cast<char*>(data()) + bytes(), kGuard, cudaMemcpyDeviceToHost);
    for (unsigned char c : before)
      if (c != 0xa5) return false;
    for (unsigned char c : after)
      if (c != 0xa5) return false;
    return true;
  }

 private:
  DType dtype_;
  std::vector<int64_t> dims_;
  size_t count_ = 0, esize_ = 0, lead_ = 0, total_ = 0;
  void* base_ = nullptr;
};

// |got - ref| <= bound[i] for every element (NaN and Inf never pass, whatever the bound), and the
// relative RMS error sqrt(sum err^2 / sum ref^2) <= rms_limit when rms_limit > 0. On failure it
// names the worst elements, the count and the error statistics.
inline ::testing::AssertionResult within(const std::string& what, const Vec& got, const Vec& ref,
                                         const Vec& bound, double rms_limit = 0.0) {
  if (got.size() != ref.size() || bound.size() != ref.size())
    return ::testing::AssertionFailure()
           << what << ": sizes " << got.size() << " / " << ref.size() << " / " << bound.size();
  size_t bad = 0;
  double err2 = 0.0, ref2 = 0.0, worst_ratio = 0.0;
  std::vector<size_t> examples;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    const bool finite = std::isfinite(got[i]) && std::isfinite(ref[i]);
    const bool ok = finite && e <= bound[i];
    if (finite) {
      err2 += e * e;
      ref2 += static_cast<double>(ref[i]) * ref[i];
      if (bound[i] > 0) worst_ratio = std::max(worst_ratio, e / bound[i]);
    }
    if (!ok) {
      ++bad;
      if (examples.size() < 6) examples.push_back(i);
    }
  }
  const double rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  std::ostringstream msg;
  msg.precision(9);
  msg << what << ": " << got.size() << " elements, relative rms error " << rms << ", worst err/bound "
      << worst_ratio;
  if (bad == 0 && (rms_limit <= 0 || rms <= rms_limit)) return ::testing::AssertionSuccess() << msg.str();
  if (bad) msg << "; " << bad << " out of bounds (NaN/Inf or |err| > bound), e.g.";
  for (size_t i : examples)
    msg << "\n  [" << i << "] got " << got[i] << " ref " << ref[i] << " |err| "
        << std::fabs(static_cast<double>(got[i]) - ref[i]) << " bound " << bound[i];
  if (rms_limit > 0 && rms > rms_limit) msg << "\n  relative rms error " << rms << " > limit " << rms_limit;
  return ::testing::AssertionFailure() << msg.str();
}

// bound[i] = a * |ref[i]| + b * mag[i] (mag may be empty: b is then an absolute term).
inline Vec bounds(const Vec& ref, double a, const Vec& mag, double b) {
  Vec out(ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    out[i] = static_cast<float>(a * std::fabs(ref[i]) + b * (mag.empty() ? 1.0 : mag[i]));
  return out;
}

}  // namespace ferry::cudatest
