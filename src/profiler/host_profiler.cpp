// measure_host (profiler/machine_profiler.h): the CPU AdamW's rate (fp32 and each lean format), RAM,
// and the disk.
#include <unistd.h>

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "optim/state_format.h"
#include "profiler/cpu_adamw_probe.h"
#include "profiler/disk_rate.h"
#include "profiler/lean_adamw_probe.h"
#include "profiler/machine_profiler.h"

namespace ferry {

namespace {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  FERRY_CHECK(pages > 0 && page > 0, "profile", "cannot read the size of physical memory (sysconf)");
  return static_cast<double>(pages) * static_cast<double>(page);
}

// Parameters per second of one fused CPU AdamW pass as the engine runs it (profiler/cpu_adamw_probe.h,
// 24 bytes per parameter move), over arrays that stream from DRAM.
double cpu_adamw_rate(const ProfileOptions& options, double memory_bytes, ThreadPool& pool) {
  CpuAdamWProbe probe(cpu_adamw_probe_params(options, memory_bytes), pool);
  const double seconds = time_on_host([&] { probe.pass(); }, options.cpu_adamw_timing);
  return static_cast<double>(probe.params()) / seconds;
}

// The same for a lean optimizer_state format (profiler/lean_adamw_probe.h), over as many parameters.
double lean_adamw_rate(OptimizerStateFormat format, const ProfileOptions& options, double memory_bytes,
                       ThreadPool& pool) {
  LeanAdamWProbe probe(format, cpu_adamw_probe_params(options, memory_bytes), pool);
  const double seconds = time_on_host([&] { probe.pass(); }, options.cpu_adamw_timing);
  return static_cast<double>(probe.params()) / seconds;
}

}  // namespace

size_t cpu_adamw_probe_params(const ProfileOptions& options, double memory_bytes) {
  constexpr size_t kHostBytesPerParam = 3 * sizeof(float) + sizeof(uint16_t);
  const size_t at_most = static_cast<size_t>(memory_bytes / 16.0) / kHostBytesPerParam;
  return std::max<size_t>(64, std::min(static_cast<size_t>(options.cpu_adamw_params), at_most) / 64 * 64);
}

void measure_cpu_updates(const ProfileOptions& options, HostProfile& h) {
  ThreadPool& pool = ThreadPool::global();
  h.cpu_adamw_params_per_s = cpu_adamw_rate(options, h.memory_bytes, pool);
  for (const auto f : kLeanStateFormats)
    h.lean_adamw_params_per_s[static_cast<int>(f)] = lean_adamw_rate(f, options, h.memory_bytes, pool);
}

bool cpu_updates_ran_slow(double host_part_alone, double sharing_part_alone) {
  return sharing_part_alone > host_part_alone * kCpuUpdateRatesAgree;
}

void keep_faster_cpu_updates(HostProfile& kept, const HostProfile& again) {
  kept.cpu_adamw_params_per_s = std::max(kept.cpu_adamw_params_per_s, again.cpu_adamw_params_per_s);
  for (const auto f : kLeanStateFormats) {
    double& rate = kept.lean_adamw_params_per_s[static_cast<int>(f)];
    rate = std::max(rate, again.lean_adamw_params_per_s[static_cast<int>(f)]);
  }
}

HostProfile measure_host(const ProfileOptions& options) {
  HostProfile h;
  h.threads = static_cast<int>(ThreadPool::global().size());
  h.memory_bytes = physical_memory_bytes();
  measure_cpu_updates(options, h);
  if (options.measure_disk) {
    FERRY_CHECK(!options.disk_dir.empty(), "profile",
                "measuring the disk needs a directory to write a probe file in");
    // A disk that cannot be probed leaves the rates 0 ("not measured", no disk tier), said in the
    // log, rather than losing the measurements above.
    try {
      const DiskRates disk = measure_disk_rates(options.disk_dir, options.disk_bytes);
      h.disk_read_bytes_per_s = disk.read_bytes_per_s;
      h.disk_write_bytes_per_s = disk.write_bytes_per_s;
    } catch (const Error& e) {
      log_warn("profile: disk not measured: {}", e.what());
    }
  }
  return h;
}

}  // namespace ferry
