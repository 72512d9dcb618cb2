// measure_transfers (profiler/machine_profiler.h): pinned copies between the host and the device.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "device/memory_ledger.h"
#include "profiler/machine_profiler.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "profile";

// One direction's rate and per-copy latency from a small and a large copy's seconds: the model
// seconds = latency + bytes / rate through both points.
void fit_copy(size_t small, double small_s, size_t large, double large_s, double* rate, double* latency) {
  *rate = large_s > small_s ? static_cast<double>(large - small) / (large_s - small_s)
                            : static_cast<double>(large) / large_s;
  *latency = std::max(0.0, small_s - static_cast<double>(small) / *rate);
}

// Seconds of one copy in each direction while the other direction copies too.
struct DuplexSeconds {
  double h2d = 0.0, d2h = 0.0;
};

// Both directions at once, each timed to its own end: a host task queued behind each stream's last
// copy reads the clock when that stream gets there (the device has no event timestamps).
DuplexSeconds time_duplex(Device& device, void* dev_dst, const void* host_src, void* host_dst,
                          const void* dev_src, size_t bytes, double slower_alone_s,
                          const TimingOptions& timing) {
  const int64_t runs = runs_per_sample(slower_alone_s, timing);
  auto sample = [&](std::vector<double>* h2d, std::vector<double>* d2h) {
    double h2d_done = 0.0, d2h_done = 0.0;
    const double start = timing_now(timing);
    for (int64_t i = 0; i < runs; ++i) {
      device.copy_to_device(dev_dst, host_src, bytes, StreamKind::HostToDevice);
      device.copy_to_host(host_dst, dev_src, bytes, StreamKind::DeviceToHost);
    }
    device.host_task(StreamKind::HostToDevice, [&] { h2d_done = timing_now(timing); });
    device.host_task(StreamKind::DeviceToHost, [&] { d2h_done = timing_now(timing); });
    device.synchronize_all();
    const double n = static_cast<double>(runs);
    if (h2d != nullptr) h2d->push_back((h2d_done - start) / n);
    if (d2h != nullptr) d2h->push_back((d2h_done - start) / n);
  };
  sample(nullptr, nullptr);  // warm-up
  std::vector<double> h2d, d2h;
  const double start = timing_now(timing);
  for (int r = 0; r < timing.repeats; ++r) {
    sample(&h2d, &d2h);
    if (h2d.size() >= 3 && timing_now(timing) - start > timing.max_seconds) break;
  }
  return {median(h2d), median(d2h)};
}

// The rate of a copy of `bytes` that took `seconds`, the per-copy latency taken off as in fit_copy.
double rate_after_latency(size_t bytes, double seconds, double latency) {
  const double moving = seconds - latency;
  return static_cast<double>(bytes) / (moving > 0.0 ? moving : seconds);
}

}  // namespace

TransferProfile measure_transfers(Device& device, const ProfileOptions& options) {
  const MemoryStats mem = device.memory();
  const size_t free = mem.capacity - std::min(mem.capacity, mem.in_use);
  const size_t small = std::max<size_t>(options.small_copy_bytes, 1);
  // Two device buffers (one per direction of the duplex copies) within half the free memory.
  const size_t large = std::min(options.copy_bytes, free / 4) / 4096 * 4096;
  FERRY_CHECK(
      large >= 16 * small, kWhere,
      "measuring the copy bandwidth needs two device buffers of at least {}; {} of device memory are free: "
      "raise gpu_memory",
      format_bytes(16 * small), format_bytes(free));

  DeviceBuffer dev_a(device, large, "profile copy target"), dev_b(device, large, "profile copy source");
  PinnedBuffer host_a(device, large, "profile copy source"), host_b(device, large, "profile copy target");
  // Touch the host pages now, so that first-touch faults are not timed as copies.
  std::memset(host_a.data(), 0x3c, large);
  std::memset(host_b.data(), 0x3c, large);
  device.copy_to_device(dev_b.data(), host_a.data(), large, StreamKind::HostToDevice);
  device.synchronize_all();

  const TimingOptions& t = options.timing;
  auto h2d = [&](size_t bytes) {
    return time_on_device(
        device, [&] { device.copy_to_device(dev_a.data(), host_a.data(), bytes, StreamKind::HostToDevice); },
        t);
  };
  auto d2h = [&](size_t bytes) {
    return time_on_device(
        device, [&] { device.copy_to_host(host_b.data(), dev_b.data(), bytes, StreamKind::DeviceToHost); },
        t);
  };
  const double h2d_small = h2d(small), h2d_large = h2d(large);
  const double d2h_small = d2h(small), d2h_large = d2h(large);

  TransferProfile p;
  double h2d_latency = 0.0, d2h_latency = 0.0;
  fit_copy(small, h2d_small, large, h2d_large, &p.h2d_bytes_per_s, &h2d_latency);
  fit_copy(small, d2h_small, large, d2h_large, &p.d2h_bytes_per_s, &d2h_latency);
  p.latency_s = 0.5 * (h2d_latency + d2h_latency);
  const DuplexSeconds both = time_duplex(device, dev_a.data(), host_a.data(), host_b.data(), dev_b.data(),
                                         large, std::max(h2d_large, d2h_large), t);
  p.duplex_h2d_bytes_per_s = rate_after_latency(large, both.h2d, h2d_latency);
  p.duplex_d2h_bytes_per_s = rate_after_latency(large, both.d2h, d2h_latency);
  return p;
}

}  // namespace ferry
