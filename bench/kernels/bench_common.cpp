#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/error.h"

namespace ferry::bench {

DeviceBuf::DeviceBuf(size_t bytes) : bytes_(bytes) {
  FERRY_CUDA_CHECK(cudaMalloc(&p_, bytes == 0 ? 16 : bytes));
}
DeviceBuf::~DeviceBuf() {
  if (p_) cudaFree(p_);
}
DeviceBuf::DeviceBuf(DeviceBuf&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
}
DeviceBuf& DeviceBuf::operator=(DeviceBuf&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
  }
  return *this;
}

DeviceTensor::DeviceTensor(DType dtype, std::initializer_list<int64_t> dims) {
  t = Tensor(nullptr, dtype, dims);
  buf = DeviceBuf(t.bytes());
  t.data = buf.get();
}

Vec random_vec(size_t n, uint32_t seed, float lo, float hi, bool bf16_round) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = bf16_round ? bf16_to_f32(f32_to_bf16(dist(gen))) : dist(gen);
  return v;
}

void upload(const DeviceTensor& d, const Vec& host) {
  FERRY_ASSERT(static_cast<int64_t>(host.size()) == d.t.numel());
  std::vector<unsigned char> raw(d.t.bytes());
  convert_from_f32(host.data(), d.t.dtype, raw.data(), host.size());
  FERRY_CUDA_CHECK(cudaMemcpy(d.t.data, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}

void fill_random(const DeviceTensor& d, uint32_t seed, float lo, float hi) {
  const size_t n = static_cast<size_t>(d.t.numel());
  const size_t block = std::min<size_t>(n, size_t{1} << 22);
  const Vec host = random_vec(block, seed, lo, hi, false);
  const size_t es = dtype_size(d.t.dtype);
  std::vector<unsigned char> raw(block * es);
  convert_from_f32(host.data(), d.t.dtype, raw.data(), block);
  for (size_t at = 0; at < n; at += block) {
    const size_t m = std::min(block, n - at);
    FERRY_CUDA_CHECK(
        cudaMemcpy(static_cast<char*>(d.t.data) + at * es, raw.data(), m * es, cudaMemcpyHostToDevice));
  }
}

void upload_ints(const DeviceBuf& d, const std::vector<int32_t>& host) {
  FERRY_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
}

Vec download(const DeviceTensor& d) {
  FERRY_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> raw(d.t.bytes());
  FERRY_CUDA_CHECK(cudaMemcpy(raw.data(), d.t.data, raw.size(), cudaMemcpyDeviceToHost));
  Vec out(static_cast<size_t>(d.t.numel()));
  convert_to_f32(raw.data(), d.t.dtype, out.data(), out.size());
  return out;
}

double rel_rms(const Vec& got, const Vec& ref) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double e = static_cast<double>(got[i]) - ref[i];
    e2 += e * e;
    r2 += static_cast<double>(ref[i]) * ref[i];
  }
  return r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
}

namespace {
// The median of timed calls given in milliseconds, in microseconds.
double median_us(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}
}  // namespace

double Bench::time_us_back_to_back(const std::function<void()>& fn) {
  for (int i = 0; i < warmup_; ++i) fn();
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(reps_));
  for (cudaEvent_t& e : events) FERRY_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < reps_; ++r) {
    flush_l2(r);
    FERRY_CUDA_CHECK(cudaEventRecord(events[2 * r], stream_));
    fn();
    FERRY_CUDA_CHECK(cudaEventRecord(events[2 * r + 1], stream_));
  }
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> ms(static_cast<size_t>(reps_));
  for (int r = 0; r < reps_; ++r)
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms[r], events[2 * r], events[2 * r + 1]));
  for (cudaEvent_t e : events) FERRY_CUDA_CHECK(cudaEventDestroy(e));
  return median_us(std::move(ms));
}

Bench::Bench(int reps, int warmup) : reps_(reps), warmup_(warmup) {
  int device = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FERRY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  device_name_ = prop.name;
  FERRY_CUDA_CHECK(cudaStreamCreate(&stream_));
  FERRY_CUDA_CHECK(cudaEventCreate(&start_));
  FERRY_CUDA_CHECK(cudaEventCreate(&stop_));
  flush_ = DeviceBuf(2 * static_cast<size_t>(prop.l2CacheSize > 0 ? prop.l2CacheSize : (64 << 20)));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
}

Bench::~Bench() {
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Bench::flush_l2(int value) {
  FERRY_CUDA_CHECK(cudaMemsetAsync(flush_.get(), value & 0xff, flush_.bytes(), stream_));
}

double Bench::time_us(const std::function<void()>& fn, bool flush_l2) {
  for (int i = 0; i < warmup_; ++i) fn();
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> ms;
  for (int r = 0; r < reps_; ++r) {
    if (flush_l2) this->flush_l2(r);
    FERRY_CUDA_CHECK(cudaEventRecord(start_, stream_));
    fn();
    FERRY_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    FERRY_CUDA_CHECK(cudaEventSynchronize(stop_));
    float t = 0;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&t, start_, stop_));
    ms.push_back(t);
  }
  return median_us(std::move(ms));
}

void Bench::check(const std::string& what, bool ok, const std::string& detail) {
  std::printf("check %-44s %s  %s\n", what.c_str(), ok ? "ok  " : "FAIL", detail.c_str());
  std::fflush(stdout);
  if (!ok) failed_ = true;
}

void Bench::add(const Row& row) {
  rows_.push_back(row);
  std::printf("timed %-20s %-40s %10.1f us\n", row.kernel.c_str(), row.shape.c_str(), row.us);
  std::fflush(stdout);
}

void Bench::print_table() const {
  std::printf(
      "\n| kernel | shape | time (us) | achieved | of H200 peak | note |\n|---|---|---:|---:|---:|---|\n");
  for (const Row& r : rows_) {
    const double s = r.us * 1e-6;
    char achieved[64], frac[32];
    if (r.flops > 0) {
      std::snprintf(achieved, sizeof achieved, "%.1f TFLOP/s", r.flops / s / 1e12);
      std::snprintf(frac, sizeof frac, "%.0f%% of 776", 100.0 * r.flops / s / kPeakFlops);
    } else {
      std::snprintf(achieved, sizeof achieved, "%.0f GB/s", r.bytes / s / 1e9);
      std::snprintf(frac, sizeof frac, "%.0f%% of 4300", 100.0 * r.bytes / s / kPeakBytesPerSecond);
    }
    std::printf("| %s | %s | %.1f | %s | %s | %s |\n", r.kernel.c_str(), r.shape.c_str(), r.us, achieved,
                frac, r.note.c_str());
  }
}

}  // namespace ferry::bench
