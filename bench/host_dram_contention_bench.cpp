// Host DRAM shared between the CPU AdamW and PCIe copies: does pinned-memory DMA running beside the
// CPU pass slow it, and does the pass slow the DMA? The cost model times each alone (planner/
// profile.h), so this measures what it does not see, on a CUDA device:
//   cpu alone          the fused CPU AdamW (bf16 gradients in, bf16 copy out, 26 bytes/param)
//   dma alone          h2d only, then h2d and d2h at once, each direction from its own pinned buffer
//   cpu beside dma     the CPU AdamW while the device copies without pause, for each DMA pattern
// Each figure is the median over --repeats samples of --seconds each.
//
//   host_dram_contention_bench [--params=N] [--copy_mib=M] [--seconds=S] [--repeats=R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "optim/cpu_adamw.h"
#include "optim/host_array.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

size_t arg_value(int argc, char** argv, const char* name, size_t fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::strtoull(argv[i] + prefix.size(), nullptr, 10);
  }
  return fallback;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

enum class Dma { None, HostToDevice, Duplex };

// Copies queued back to back on the device's copy streams until stopped, counting the bytes that
// finished. At most two copies per direction are in flight, so stopping takes one copy's time.
class DmaLoad {
 public:
  DmaLoad(Device& device, size_t bytes, Dma pattern) : device_(device), bytes_(bytes), pattern_(pattern) {
    h2d_src_ = device.allocate_pinned(bytes, "contention h2d source");
    d2h_dst_ = device.allocate_pinned(bytes, "contention d2h target");
    std::memset(h2d_src_, 0x3c, bytes);
    std::memset(d2h_dst_, 0x3c, bytes);
    dev_dst_ = device.allocate(bytes, "contention h2d target");
    dev_src_ = device.allocate(bytes, "contention d2h source");
  }
  ~DmaLoad() {
    stop();
    device_.release(dev_src_);
    device_.release(dev_dst_);
    device_.release_pinned(d2h_dst_);
    device_.release_pinned(h2d_src_);
  }

  void start() {
    running_ = true;
    h2d_bytes_ = d2h_bytes_ = 0;
    started_ = Clock::now();
    driver_ = std::thread([this] { drive(); });
  }
  // Stops and returns the seconds the copies ran.
  double stop() {
    if (!driver_.joinable()) return 0.0;
    running_ = false;
    driver_.join();
    device_.synchronize_all();
    return seconds_since(started_);
  }
  double h2d_gbs(double seconds) const { return static_cast<double>(h2d_bytes_) / seconds / 1e9; }
  double d2h_gbs(double seconds) const { return static_cast<double>(d2h_bytes_) / seconds / 1e9; }

 private:
  void drive() {
    const bool duplex = pattern_ == Dma::Duplex;
    EventId h2d_prev{}, d2h_prev{};
    bool have_prev = false;
    while (running_) {
      device_.copy_to_device(dev_dst_, h2d_src_, bytes_, StreamKind::HostToDevice);
      const EventId h2d_now = device_.record(StreamKind::HostToDevice);
      EventId d2h_now{};
      if (duplex) {
        device_.copy_to_host(d2h_dst_, dev_src_, bytes_, StreamKind::DeviceToHost);
        d2h_now = device_.record(StreamKind::DeviceToHost);
      }
      if (have_prev) {
        device_.synchronize(h2d_prev);
        h2d_bytes_ += bytes_;
        if (duplex) {
          device_.synchronize(d2h_prev);
          d2h_bytes_ += bytes_;
        }
      }
      h2d_prev = h2d_now;
      d2h_prev = d2h_now;
      have_prev = true;
    }
  }

  Device& device_;
  size_t bytes_;
  Dma pattern_;
  void *h2d_src_ = nullptr, *d2h_dst_ = nullptr, *dev_dst_ = nullptr, *dev_src_ = nullptr;
  std::atomic<bool> running_{false};
  size_t h2d_bytes_ = 0, d2h_bytes_ = 0;
  Clock::time_point started_;
  std::thread driver_;
};

int run(int argc, char** argv) {
  const size_t n = arg_value(argc, argv, "params", 100'000'000);
  const size_t copy_bytes = arg_value(argc, argv, "copy_mib", 64) << 20;
  const double sample_s = static_cast<double>(arg_value(argc, argv, "seconds", 2));
  const int repeats = static_cast<int>(arg_value(argc, argv, "repeats", 3));
  ThreadPool& pool = ThreadPool::global();
  auto device = make_cuda_device(0, size_t{4} << 30);
  std::printf("host_dram_contention_bench: %zu params, %zu threads, copies of %zu MiB, %s\n", n, pool.size(),
              copy_bytes >> 20, device->name().c_str());

  HostArray master(n, "bench master"), m(n, "bench m"), v(n, "bench v");
  auto grad = std::make_unique_for_overwrite<uint16_t[]>(n);
  pool.parallel_for(
      n,
      [&](size_t b, size_t e) {
        std::fill(master.data() + b, master.data() + e, 0.02f);
        std::fill(m.data() + b, m.data() + e, 1e-4f);
        std::fill(v.data() + b, v.data() + e, 1e-8f);
        std::fill(grad.get() + b, grad.get() + e, f32_to_bf16(1e-3f));
      },
      size_t{1} << 16);
  AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  const AdamWSegment all{0, n, true};
  int64_t step = 0;
  // Params/s of back-to-back passes for sample_s seconds (the gradient staging doubles as the bf16
  // copy's target, as in the engine).
  auto cpu_sample = [&] {
    const auto start = Clock::now();
    size_t passes = 0;
    do {
      cpu_adamw_step({master.data(), m.data(), v.data(), grad.get(), DType::BF16, grad.get()}, {&all, 1}, hyper,
                     ++step, 1.0f, pool);
      ++passes;
    } while (seconds_since(start) < sample_s);
    return static_cast<double>(passes * n) / seconds_since(start);
  };
  cpu_sample();  // warm-up: page faults, huge pages, the pool's threads

  std::vector<double> alone;
  for (int r = 0; r < repeats; ++r) alone.push_back(cpu_sample());
  const double cpu_alone = median(alone);
  std::printf("%-28s %6.2f G params/s  %6.1f GB/s\n", "cpu alone", cpu_alone / 1e9, cpu_alone * 26 / 1e9);

  for (const Dma pattern : {Dma::HostToDevice, Dma::Duplex}) {
    const char* label = pattern == Dma::Duplex ? "h2d+d2h" : "h2d";
    DmaLoad load(*device, copy_bytes, pattern);
    std::vector<double> h2d, d2h, cpu, h2d_beside, d2h_beside;
    for (int r = 0; r < repeats; ++r) {
      load.start();
      std::this_thread::sleep_for(std::chrono::duration<double>(sample_s));
      const double s = load.stop();
      h2d.push_back(load.h2d_gbs(s));
      d2h.push_back(load.d2h_gbs(s));
      load.start();
      cpu.push_back(cpu_sample());
      const double s2 = load.stop();
      h2d_beside.push_back(load.h2d_gbs(s2));
      d2h_beside.push_back(load.d2h_gbs(s2));
    }
    const double cpu_beside = median(cpu);
    std::printf("%-28s h2d %6.1f GB/s  d2h %6.1f GB/s\n", (std::string("dma alone, ") + label).c_str(), median(h2d),
                median(d2h));
    std::printf("%-28s %6.2f G params/s  %6.1f GB/s  (%.3fx alone); h2d %6.1f GB/s  d2h %6.1f GB/s (%.3fx alone)\n",
                (std::string("cpu beside ") + label).c_str(), cpu_beside / 1e9, cpu_beside * 26 / 1e9,
                cpu_beside / cpu_alone, median(h2d_beside), median(d2h_beside),
                (median(h2d_beside) + median(d2h_beside)) / std::max(1e-9, median(h2d) + median(d2h)));
    std::printf("%-28s host DRAM total %6.1f GB/s (cpu %.1f + dma %.1f)\n", "", (cpu_beside * 26 / 1e9) +
                median(h2d_beside) + median(d2h_beside), cpu_beside * 26 / 1e9,
                median(h2d_beside) + median(d2h_beside));
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) { return ferry::run(argc, argv); }
