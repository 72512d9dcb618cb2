// measure_memory_sharing (profiler/machine_profiler.h): the CPU AdamW beside pinned copies. The DMA
// reads and writes the host DRAM the CPU pass streams through, so each slows the other; the cost
// model's stream simulator scales both by the measured shares while they overlap.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "device/memory_ledger.h"
#include "profiler/cpu_adamw_probe.h"
#include "profiler/machine_profiler.h"
#include "profiler/profile_timing.h"

namespace ferry {

namespace {

using Clock = std::chrono::steady_clock;

// Pinned copies queued back to back on the device's copy streams by a thread of their own, h2d
// alone or h2d and d2h at once, until stopped; counts the bytes copied. At most two copies per
// direction are in flight, so stopping waits for about one copy.
class BackgroundCopies {
 public:
  BackgroundCopies(Device& device, size_t bytes)
      : device_(device),
        bytes_(bytes),
        h2d_src_(device, bytes, "memory sharing h2d source"),
        d2h_dst_(device, bytes, "memory sharing d2h target"),
        dev_dst_(device, bytes, "memory sharing h2d target"),
        dev_src_(device, bytes, "memory sharing d2h source") {
    // Touch the host pages now, so that first-touch faults are not timed as copies.
    std::memset(h2d_src_.data(), 0x3c, bytes);
    std::memset(d2h_dst_.data(), 0x3c, bytes);
  }
  ~BackgroundCopies() { stop(); }

  void start(bool duplex) {
    FERRY_ASSERT(!driver_.joinable());
    running_ = true;
    h2d_bytes_ = d2h_bytes_ = 0;
    started_ = Clock::now();
    driver_ = std::thread([this, duplex] { drive(duplex); });
  }
  // Stops, and returns the mean bytes/s of each direction that copied since start().
  double stop() {
    if (!driver_.joinable()) return 0.0;
    running_ = false;
    driver_.join();
    device_.synchronize_all();
    const double seconds = seconds_since(started_);
    const int directions = d2h_bytes_ > 0 ? 2 : 1;
    return static_cast<double>(h2d_bytes_ + d2h_bytes_) / directions / seconds;
  }

 private:
  void drive(bool duplex) {
    EventId h2d_prev = -1, d2h_prev = -1;
    // Waits for the copies behind the previous events and counts their bytes.
    auto count_previous = [&] {
      if (h2d_prev >= 0) {
        device_.synchronize(h2d_prev);
        h2d_bytes_ += bytes_;
      }
      if (d2h_prev >= 0) {
        device_.synchronize(d2h_prev);
        d2h_bytes_ += bytes_;
      }
    };
    while (running_) {
      device_.copy_to_device(dev_dst_.data(), h2d_src_.data(), bytes_, StreamKind::HostToDevice);
      const EventId h2d_now = device_.record(StreamKind::HostToDevice);
      EventId d2h_now = -1;
      if (duplex) {
        device_.copy_to_host(d2h_dst_.data(), dev_src_.data(), bytes_, StreamKind::DeviceToHost);
        d2h_now = device_.record(StreamKind::DeviceToHost);
      }
      count_previous();
      h2d_prev = h2d_now;
      d2h_prev = d2h_now;
    }
    count_previous();  // the copies still in flight finish before stop() reads the clock
  }

  Device& device_;
  size_t bytes_;
  PinnedBuffer h2d_src_, d2h_dst_;
  DeviceBuffer dev_dst_, dev_src_;
  std::atomic<bool> running_{false};
  size_t h2d_bytes_ = 0, d2h_bytes_ = 0;  // written by the driver, read after it is joined
  Clock::time_point started_;
  std::thread driver_;
};

}  // namespace

HostMemorySharing MemorySharingRates::shares() const {
  auto share = [](double beside, double alone) {
    // A share above 1 is noise (both ran as fast as alone); a share near 0 would mean a stalled
    // measurement, not a machine, so it is bounded away from it.
    return alone > 0.0 ? std::clamp(beside / alone, 0.05, 1.0) : 1.0;
  };
  return {share(cpu_beside_copy, cpu_alone), share(cpu_beside_duplex, cpu_alone),
          share(copy_beside_cpu, copy_alone), share(duplex_beside_cpu, duplex_alone)};
}

MemorySharingRates measure_memory_sharing(Device& device, const ProfileOptions& options,
                                          double memory_bytes) {
  const MemoryStats mem = device.memory();
  const size_t free = mem.capacity - std::min(mem.capacity, mem.in_use);
  const size_t bytes = std::min(options.copy_bytes, free / 4) / 4096 * 4096;
  // As small as the copy bandwidth's own measurement allows (measure_transfers): a device that
  // fits two micro-chunks has room for these.
  constexpr size_t kSmallest = size_t{64} << 10;
  FERRY_CHECK(
      bytes >= kSmallest, "profile",
      "measuring the CPU AdamW beside copies needs two device buffers of {}; {} of device memory are free: "
      "raise gpu_memory",
      format_bytes(kSmallest), format_bytes(free));
  ThreadPool& pool = ThreadPool::global();
  CpuAdamWProbe probe(cpu_adamw_probe_params(options, memory_bytes), pool);
  BackgroundCopies copies(device, bytes);
  const double sample_s = options.memory_sharing_sample_seconds;
  // Parameters per second of back-to-back passes for sample_s.
  auto cpu_sample = [&] {
    const auto start = Clock::now();
    size_t passes = 0;
    do {
      probe.pass();
      ++passes;
    } while (seconds_since(start) < sample_s);
    return static_cast<double>(passes * probe.params()) / seconds_since(start);
  };
  auto copies_alone = [&](bool duplex) {
    copies.start(duplex);
    std::this_thread::sleep_for(std::chrono::duration<double>(sample_s));
    return copies.stop();
  };
  // Both at once: the copies run for the CPU's sample, and their rate is taken over the same time.
  auto side_by_side = [&](bool duplex, double* cpu, double* copy) {
    copies.start(duplex);
    *cpu = cpu_sample();
    *copy = copies.stop();
  };
  cpu_sample();  // warm-up: page faults, huge pages, the pool's threads
  copies_alone(true);

  // The samples of each figure interleave, so that a drifting machine moves them all alike.
  std::vector<double> cpu_alone, cpu_copy, cpu_duplex, copy_alone, copy_cpu, duplex_alone, duplex_cpu;
  for (int r = 0; r < std::max(1, options.memory_sharing_repeats); ++r) {
    cpu_alone.push_back(cpu_sample());
    copy_alone.push_back(copies_alone(false));
    side_by_side(false, &cpu_copy.emplace_back(), &copy_cpu.emplace_back());
    duplex_alone.push_back(copies_alone(true));
    side_by_side(true, &cpu_duplex.emplace_back(), &duplex_cpu.emplace_back());
  }
  MemorySharingRates rates;
  rates.cpu_alone = median(cpu_alone);
  rates.cpu_beside_copy = median(cpu_copy);
  rates.cpu_beside_duplex = median(cpu_duplex);
  rates.copy_alone = median(copy_alone);
  rates.copy_beside_cpu = median(copy_cpu);
  rates.duplex_alone = median(duplex_alone);
  rates.duplex_beside_cpu = median(duplex_cpu);
  return rates;
}

}  // namespace ferry
