// Shared parts of ferry_kernel_bench: device buffers, random fills, CUDA-event timing with an L2
// flush, reference checks against the CPU backend, and the markdown table of results.
//
// Roofline numbers are the lent H200's as measured for DESIGN.md §5 (bf16 GEMM ~776 TFLOP/s) and
// its HBM3e copy bandwidth (~4.3 TB/s); every row states which one it is measured against.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_ops.h"

namespace ferry::bench {

constexpr double kPeakBytesPerSecond = 4.3e12;
constexpr double kPeakFlops = 776e12;

using Vec = std::vector<float>;

// Owns `bytes` of device memory (cudaMalloc).
class DeviceBuf {
 public:
  DeviceBuf() = default;
  explicit DeviceBuf(size_t bytes);
  ~DeviceBuf();
  DeviceBuf(DeviceBuf&& o) noexcept;
  DeviceBuf& operator=(DeviceBuf&& o) noexcept;
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A device tensor of `dtype` and dims, with its memory.
struct DeviceTensor {
  DeviceBuf buf;
  Tensor t;
  DeviceTensor() = default;
  DeviceTensor(DType dtype, std::initializer_list<int64_t> dims);
};

// Uniform values in [lo, hi) from a seed, rounded to bf16 when `bf16_round`.
Vec random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f, bool bf16_round = true);
// Writes host fp32 values converted to the tensor's dtype.
void upload(const DeviceTensor& d, const Vec& host);
// Fills a (large) tensor with uniform random values in [lo, hi): a random block of up to 4M values
// is made on the host and tiled over the tensor.
void fill_random(const DeviceTensor& d, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
void upload_ints(const DeviceBuf& d, const std::vector<int32_t>& host);
// The tensor as fp32 (synchronizes the device).
Vec download(const DeviceTensor& d);

// Relative RMS error sqrt(sum (got - ref)^2 / sum ref^2); infinity when got holds NaN or Inf.
double rel_rms(const Vec& got, const Vec& ref);

struct Row {
  std::string kernel;
  std::string shape;
  double us = 0;     // median time per call
  double bytes = 0;  // minimum bytes moved per call (0: compute-bound row)
  double flops = 0;  // floating-point operations per call (0: memory-bound row)
  std::string note;
};

class Bench {
 public:
  Bench(int reps, int warmup);
  ~Bench();

  cudaStream_t stream() const { return stream_; }
  // Median time in microseconds of `fn` (issued to stream()), after `warmup` untimed calls; with
  // flush_l2, a write of twice the L2 size precedes each timed call, outside the timed region.
  double time_us(const std::function<void()>& fn, bool flush_l2 = true);
  // The same, with the timed calls and their flushes queued back to back and read after one
  // synchronization: the GPU never idles between calls, as in a training step, where clocks settle
  // under the power cap. time_us waits for each call, so each starts on a GPU that just rested.
  double time_us_back_to_back(const std::function<void()>& fn);
  // Writes twice the L2 size on stream(), so that the next call finds none of its data in L2.
  void flush_l2(int value = 0);
  // Records a reference check: prints it, and marks the run failed when !ok.
  void check(const std::string& what, bool ok, const std::string& detail);
  void add(const Row& row);
  void print_table() const;
  bool failed() const { return failed_; }
  std::string device_name() const { return device_name_; }

 private:
  int reps_, warmup_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuf flush_;
  std::vector<Row> rows_;
  bool failed_ = false;
  std::string device_name_;
};

// The kernel families (one file each).
void bench_gemm(Bench& b);
void bench_gemm_candidates(Bench& b);
void bench_head_gemms(Bench& b);
void bench_rmsnorm(Bench& b);
void bench_rope(Bench& b);
void bench_swiglu(Bench& b);
void bench_embedding(Bench& b);
void bench_flce(Bench& b);
void bench_adamw(Bench& b);
void bench_attention_cached(Bench& b);

}  // namespace ferry::bench
