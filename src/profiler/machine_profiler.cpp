#include "profiler/machine_profiler.h"

#include <chrono>

#include "core/log.h"
#include "device/memory_ledger.h"

namespace ferry {

DType engine_weight_dtype(Device& device) {
  return device.native_stream(StreamKind::Compute) != nullptr ? DType::BF16 : DType::F32;
}

ProfileOptions default_profile_options(Device& device) {
  ProfileOptions o;
  if (device.native_stream(StreamKind::Compute) != nullptr) return o;
  o.timing.min_sample_seconds = 0.005;
  o.timing.max_seconds = 0.5;
  o.cpu_adamw_timing = o.timing;
  o.copy_bytes = size_t{16} << 20;
  o.cpu_adamw_params = int64_t{8} << 20;
  o.gpu_adamw_params = int64_t{4} << 20;
  o.memory_sharing_sample_seconds = 0.05;
  o.compute_soak_seconds = 0.0;  // the CPU has no power cap to settle into
  return o;
}

MachineProfile measure_profile(Device& device, Ops& ops, const ModelConfig& config, int64_t seq_len,
                               const ProfileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MachineProfile p;
  p.device_name = device.name();
  p.kernels = ops.kernels();
  p.method = kProfilerMethod;
  p.device_memory_bytes = static_cast<double>(device.memory().capacity);
  p.device_uncapped_memory_bytes = static_cast<double>(device.uncapped_memory());
  p.seq_len = seq_len;
  p.weight_dtype = engine_weight_dtype(device);
  p.shape_key = model_shape_key(config, seq_len, p.weight_dtype);
  log_info("profile: measuring {} for {} ({} of device memory)", p.device_name, p.shape_key,
           format_bytes(device.memory().capacity));
  auto part = [&](const char* what, auto measure) {
    const auto part_start = std::chrono::steady_clock::now();
    measure();
    log_info("profile: {} measured in {:.1f} s", what,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - part_start).count());
  };
  part("compute", [&] { p.compute = measure_compute(device, ops, config, seq_len, options); });
  part("copies", [&] { p.transfer = measure_transfers(device, options); });
  part("host", [&] { p.host = measure_host(options); });
  MemorySharingRates sharing;
  part("CPU AdamW beside copies", [&] {
    sharing = measure_memory_sharing(device, options, p.host.memory_bytes);
    p.host.memory_sharing = sharing.shares();
    p.host.memory_sharing_measured = true;
  });
  if (cpu_updates_ran_slow(p.host.cpu_adamw_params_per_s, sharing.cpu_alone)) {
    log_warn(
        "profile: the CPU AdamW ran at {:.2f} G params/s alone in the copies' part, {:.0f}% above the host "
        "part's {:.2f} seconds before: the host was busy then (another process, or a machine just started); "
        "measuring the CPU's rates again",
        sharing.cpu_alone / 1e9, (sharing.cpu_alone / p.host.cpu_adamw_params_per_s - 1.0) * 100.0,
        p.host.cpu_adamw_params_per_s / 1e9);
    part("CPU rates again", [&] {
      HostProfile again = p.host;
      measure_cpu_updates(options, again);
      keep_faster_cpu_updates(p.host, again);
    });
  }
  {
    // The rates a plan takes: the host part's rate alone times each share. The shares' own samples
    // alone (a shorter pass, beside the copies' pinned buffers) differ from it by a few percent, and
    // a run's end compares its steps with the former (describe_run_end).
    const double alone = p.host.cpu_adamw_params_per_s;
    log_info(
        "profile: CPU AdamW {:.2f} G params/s alone, {:.2f} beside h2d, {:.2f} beside h2d+d2h (shares "
        "{:.2f} and {:.2f} of {:.2f} alone in the same samples); copies {:.1f} GB/s alone, {:.1f} beside it; "
        "duplex {:.1f} GB/s each way alone, {:.1f} beside it",
        alone / 1e9, alone * p.host.memory_sharing.cpu_beside_copy / 1e9,
        alone * p.host.memory_sharing.cpu_beside_duplex / 1e9, p.host.memory_sharing.cpu_beside_copy,
        p.host.memory_sharing.cpu_beside_duplex, sharing.cpu_alone / 1e9, sharing.copy_alone / 1e9,
        sharing.copy_beside_cpu / 1e9, sharing.duplex_alone / 1e9, sharing.duplex_beside_cpu / 1e9);
  }
  // What is saved must load: the reader's validation names a measurement that came out unusable.
  p = profile_from_json(profile_to_json(p), "the profile just measured on " + p.device_name);
  log_info("profile: measured in {:.1f} s",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return p;
}

}  // namespace ferry
