// Host DRAM shared between the CPU AdamW and PCIe copies, on a CUDA device: the rates the machine
// profile turns into shares (profiler/machine_profiler.h, measure_memory_sharing) -- the CPU AdamW
// (bf16 gradients in, bf16 copy out, 26 bytes/param) and pinned copies (h2d alone, then h2d and
// d2h at once), each alone and beside the other -- with the DRAM traffic they add up to.
//
//   host_dram_contention_bench [--params=N] [--copy_mib=M] [--seconds=S] [--repeats=R]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/thread_pool.h"
#include "device/device.h"
#include "profiler/machine_profiler.h"

namespace ferry {
namespace {

double arg_value(int argc, char** argv, const char* name, double fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::strtod(argv[i] + prefix.size(), nullptr);
  }
  return fallback;
}

int run(int argc, char** argv) {
  auto device = make_cuda_device(0, size_t{4} << 30);
  ProfileOptions options = default_profile_options(*device);
  options.cpu_adamw_params = static_cast<int64_t>(arg_value(argc, argv, "params", 1e8));
  options.copy_bytes = static_cast<size_t>(arg_value(argc, argv, "copy_mib", 64)) << 20;
  options.memory_sharing_sample_seconds = arg_value(argc, argv, "seconds", 2);
  options.memory_sharing_repeats = static_cast<int>(arg_value(argc, argv, "repeats", 3));
  std::printf("host_dram_contention_bench: %lld params, %zu threads, copies of %zu MiB, %s\n",
              static_cast<long long>(options.cpu_adamw_params), ThreadPool::global().size(),
              options.copy_bytes >> 20, device->name().c_str());
  const MemorySharingRates r = measure_memory_sharing(*device, options, 1e15);
  const HostMemorySharing s = r.shares();
  constexpr double kCpuBytesPerParam = 26;
  auto line = [](const char* what, double cpu, double copy_gbs, int directions) {
    std::printf("%-20s cpu %5.2f G params/s (%6.1f GB/s)  copies %5.1f GB/s x %d  DRAM total %6.1f GB/s\n",
                what, cpu / 1e9, cpu * kCpuBytesPerParam / 1e9, copy_gbs / 1e9, directions,
                (cpu * kCpuBytesPerParam + copy_gbs * directions) / 1e9);
  };
  line("cpu alone", r.cpu_alone, 0, 0);
  line("h2d alone", 0, r.copy_alone, 1);
  line("cpu beside h2d", r.cpu_beside_copy, r.copy_beside_cpu, 1);
  line("h2d+d2h alone", 0, r.duplex_alone, 2);
  line("cpu beside h2d+d2h", r.cpu_beside_duplex, r.duplex_beside_cpu, 2);
  std::printf(
      "shares: cpu beside copy %.3f, beside duplex %.3f; copy beside cpu %.3f, duplex beside cpu %.3f\n",
      s.cpu_beside_copy, s.cpu_beside_duplex, s.copy_beside_cpu, s.duplex_beside_cpu);
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
