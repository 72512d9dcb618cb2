// measure_host (engine/machine_profiler.h): the CPU AdamW's rate, RAM, and the disk.
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/disk_rate.h"
#include "engine/machine_profiler.h"
#include "optim/cpu_adamw.h"
#include "optim/host_array.h"

namespace ferry {

namespace {

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  FERRY_CHECK(pages > 0 && page > 0, "profile", "cannot read the size of physical memory (sysconf)");
  return static_cast<double>(pages) * static_cast<double>(page);
}

// Parameters per second of one fused CPU AdamW pass as the engine runs it (unit_updater.cpp): the
// bf16 gradient lands in the unit's weight staging and the new bf16 weights are written over it,
// beside the fp32 master, m and v (24 bytes per parameter move).
double cpu_adamw_rate(const ProfileOptions& options, double memory_bytes, ThreadPool& pool) {
  constexpr size_t kBytesPerParam = 3 * sizeof(float) + sizeof(uint16_t);
  const size_t at_most = static_cast<size_t>(memory_bytes / 16.0) / kBytesPerParam;
  const size_t n = std::max<size_t>(64, std::min(static_cast<size_t>(options.cpu_adamw_params), at_most) / 64 * 64);
  // The state in HostArrays (huge pages where the kernel offers them) as the engine keeps it, first
  // written by the pool's threads, as the engine's state is by the threads that update it. The
  // values are ordinary numbers (no denormals); the pass has no data-dependent branch, so equal
  // values time the same as varied ones.
  HostArray master(n, "profile adamw master"), m(n, "profile adamw m"), v(n, "profile adamw v");
  auto staging = std::make_unique_for_overwrite<uint16_t[]>(n);
  pool.parallel_for(
      n,
      [&](size_t begin, size_t end) {
        std::fill(master.data() + begin, master.data() + end, 0.02f);
        std::fill(m.data() + begin, m.data() + end, 1e-4f);
        std::fill(v.data() + begin, v.data() + end, 1e-8f);
        std::fill(staging.get() + begin, staging.get() + end, f32_to_bf16(1e-3f));
      },
      size_t{1} << 16);

  AdamWUnitBuffers b;
  b.master = master.data();
  b.m = m.data();
  b.v = v.data();
  b.grad = staging.get();
  b.grad_dtype = DType::BF16;
  b.bf16_out = staging.get();
  const AdamWSegment all{0, n, true};
  AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  int64_t step = 0;
  const double seconds = time_on_host(
      [&] { cpu_adamw_step(b, std::span<const AdamWSegment>(&all, 1), hyper, ++step, 1.0f, pool); },
      options.cpu_adamw_timing);
  return static_cast<double>(n) / seconds;
}

}  // namespace

HostProfile measure_host(const ProfileOptions& options) {
  ThreadPool& pool = ThreadPool::global();
  HostProfile h;
  h.threads = static_cast<int>(pool.size());
  h.memory_bytes = physical_memory_bytes();
  h.cpu_adamw_params_per_s = cpu_adamw_rate(options, h.memory_bytes, pool);
  if (options.measure_disk) {
    FERRY_CHECK(!options.disk_dir.empty(), "profile", "measuring the disk needs a directory to write a probe file in");
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
