#include "profiler/collective_profiler.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "core/error.h"

namespace ferry {

namespace {

// Seconds per call of `repeats` all-reduces of `count` bf16 elements on every rank at once,
// after one untimed call; each rank on its own thread, the clock around all of them.
double seconds_per_all_reduce(const std::vector<Device*>& devices,
                              const std::vector<Collective*>& collectives,
                              const std::vector<DeviceBuffer>& buffers, size_t count, int repeats) {
  const size_t n = devices.size();
  std::vector<std::exception_ptr> errors(n);
  auto run = [&](size_t r, int calls) {
    try {
      devices[r]->bind_thread();
      for (int i = 0; i < calls; ++i)
        collectives[r]->all_reduce(buffers[r].data(), buffers[r].data(), count, DType::BF16,
                                   StreamKind::Compute);
      devices[r]->synchronize(devices[r]->record(StreamKind::Compute));
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  auto all = [&](int calls) {
    std::vector<std::thread> threads;
    for (size_t r = 1; r < n; ++r) threads.emplace_back(run, r, calls);
    run(0, calls);
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  };
  all(1);
  const auto start = std::chrono::steady_clock::now();
  all(repeats);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
}

}  // namespace

CollectiveProfile measure_collectives(const std::vector<Device*>& devices,
                                      const std::vector<Collective*>& collectives, size_t bytes,
                                      int repeats) {
  FERRY_CHECK(devices.size() >= 2 && collectives.size() == devices.size() && repeats >= 1, "profile",
              "measuring collectives needs 2 or more devices, each with its handle");
  size_t free = SIZE_MAX;
  for (Device* d : devices) {
    const MemoryStats m = d->memory();
    free = std::min(free, m.capacity - std::min(m.capacity, m.in_use));
  }
  bytes = std::min(bytes, free / 4) / 256 * 256;
  FERRY_CHECK(bytes >= 4096, "profile", "the devices have too little free memory to measure collectives");
  std::vector<DeviceBuffer> buffers;
  for (Device* d : devices) {
    buffers.emplace_back(*d, bytes, "collective measurement");
    d->fill_zero(buffers.back().data(), bytes, StreamKind::Compute);
  }
  const double n = static_cast<double>(devices.size());
  CollectiveProfile p;
  p.devices = static_cast<int>(devices.size());
  p.latency_s = seconds_per_all_reduce(devices, collectives, buffers, 2, repeats);
  const double large = seconds_per_all_reduce(devices, collectives, buffers, bytes / 2, repeats);
  p.bus_bytes_per_s = 2.0 * (n - 1.0) / n * static_cast<double>(bytes) / std::max(large - p.latency_s, 1e-9);
  return p;
}

}  // namespace ferry
