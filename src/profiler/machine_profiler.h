// Measuring a machine profile (planner/profile.h) on a device, for one model shape and sequence
// length: what the cost model needs to predict a plan's step time.
//
//   compute   one decoder layer's forward, its backward as the engine runs it (recompute +
//             backward), the head (final norm + fused linear-cross-entropy, forward and backward),
//             the embedding's forward and backward -- each at several micro-chunk sizes (whole
//             sequences of seq_len tokens, one document each: full causal attention), fitted to
//             fixed + per-token seconds; the device AdamW's rate (a unit whose optimizer lives on
//             the device: GPU kernels on CUDA, the queued reference AdamW on the simulated device).
//   transfer  pinned h2d and d2h bandwidth alone and both at once, and the latency of one copy.
//   host      the CPU AdamW's rate on the global thread pool (bf16 gradients in), physical RAM, and
//             optionally a directory's disk read and write rates; the CPU AdamW and pinned copies
//             beside each other (host DRAM is shared), as shares of each one's rate alone.
//
// Weights are random (no model files needed) in the dtype the engine uses on this device: BF16 on
// a CUDA device, F32 on the simulated one (it runs the fp32 CPU reference ops). Every buffer is
// bounded by the device's free memory, so the simulated device's hard cap is respected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/dtype.h"
#include "device/device.h"
#include "model/model_config.h"
#include "ops/ops.h"
#include "planner/profile.h"
#include "profiler/profile_timing.h"

namespace ferry {

struct ProfileOptions {
  // Micro-chunk sizes in sequences of seq_len tokens; the largest ones that do not fit the device
  // are dropped (two at least must fit).
  std::vector<int64_t> micro_batches = {1, 2, 4};
  TimingOptions timing;
  // One bandwidth copy, lowered to a quarter of free device memory. PCIe reaches its rate within a
  // few MiB (64 MiB at 55 GB/s is 1.2 ms against ~10 us of per-copy latency, which the fit removes).
  size_t copy_bytes = size_t{64} << 20;
  size_t small_copy_bytes = size_t{4} << 10;  // the latency copy
  // One micro-chunk of whole sequences of at least this many tokens is timed alone, its times taken
  // as proportional to the tokens (the fixed part of a pass cannot matter there); where not even
  // one fits whole, its layer is timed in sequence tiles (ComputeProfile::layer_tile_tokens).
  int64_t one_chunk_tokens = 16384;
  // The compute times' soak (TimingOptions::soak_seconds) before each measurement's samples.
  double compute_soak_seconds = 1.5;
  int64_t gpu_adamw_params = int64_t{64}
                             << 20;  // the device AdamW's array; lowered to what free memory holds
  // Large enough that the CPU AdamW streams from DRAM, not from the caches; lowered to 1/16 of RAM.
  int64_t cpu_adamw_params = int64_t{64} << 20;
  // The CPU AdamW's own timing: a memory-bound pass over freshly written arrays, measured longer
  // and after more warm-up passes than the kernels, since with clipping its rate sets the step's
  // idle. Measured at the defaults of `timing` (0.2 s), one H200 profile came out 25% below its
  // neighbours and the step it planned.
  TimingOptions cpu_adamw_timing{.repeats = 9,
                                 .warmup_runs = 3,
                                 .min_sample_seconds = 0.05,
                                 .max_seconds = 2.0,
                                 .soak_seconds = 0.0,
                                 .clock = {},
                                 .tuning_calls = {},
                                 .max_warmup_runs = 1};
  // The CPU AdamW beside pinned copies: seconds of each sample, and samples of each figure (the
  // median is kept).
  double memory_sharing_sample_seconds = 0.4;
  int memory_sharing_repeats = 3;
  bool measure_disk = false;
  std::filesystem::path disk_dir;  // where the disk probe file is written and removed
  size_t disk_bytes = size_t{256} << 20;
  uint64_t seed = 20261129;
};

// The revision of how measure_profile measures, stored in each profile (MachineProfile::method):
// a cached profile of another revision was taken another way and is measured again.
//   1: compute timed at sustained load (ProfileOptions::compute_soak_seconds), the CPU AdamW
//      beside pinned copies (host.memory_sharing);
//   2: the head also timed with fp32 weight gradients (compute.head_f32_grads);
//   3: the head with 512 MiB logits chunks (kCudaFlceChunkBytes), 2048 tokens of a 128k vocabulary;
//   4: the head timed on its own, not in turn with the embedding's passes;
//   5: the backward of a layer that kept its internals (compute.layer_backward_kept);
//   6: the lean AdamW's rate per format (host.lean_adamw_params_per_s);
//   7: the backward of a layer that recomputes nothing (compute.layer_backward_kept_all);
//   8: the head with its weight gradient's product over several logits chunks (compute.head_grouped,
//      head_f32_grads_grouped);
//   9: the layer also timed with ferry's own attention kernels where a library's are loaded, and
//      the faster kept for each direction (compute.own_attention_forward, own_attention_backward).
inline constexpr int kProfilerMethod = 9;

// ProfileOptions' defaults on a device with native (CUDA) streams. On the simulated device, smaller
// arrays and shorter samples: its profile plans test runs on this host, and measuring it must take
// seconds (a 64M-parameter CPU AdamW alone takes seconds to set up on a small machine).
ProfileOptions default_profile_options(Device& device);

// The dtype of weights and activations on the device: BF16 with native (CUDA) streams, F32 on the
// simulated device. Gradients cross PCIe in the same dtype.
DType engine_weight_dtype(Device& device);

// Measures everything above on `device` with `ops` (make_device_ops(device)). Throws ferry::Error
// when two micro-chunks of seq_len tokens do not fit the device's free memory.
MachineProfile measure_profile(Device& device, Ops& ops, const ModelConfig& config, int64_t seq_len,
                               const ProfileOptions& options);

// The parts, for callers that need only one (and for the tests).
ComputeProfile measure_compute(Device& device, Ops& ops, const ModelConfig& config, int64_t seq_len,
                               const ProfileOptions& options);
TransferProfile measure_transfers(Device& device, const ProfileOptions& options);
HostProfile measure_host(const ProfileOptions& options);

// The host part's CPU rates alone (the fused AdamW's and each lean format's) into `h`, whose
// memory_bytes sizes their arrays (measure_host's first half).
void measure_cpu_updates(const ProfileOptions& options, HostProfile& h);

// A memory-bound pass runs slower when something else uses the CPUs or DRAM, never faster, and a
// cached profile keeps what it measured for every later run on the machine: a rate taken in a busy
// moment steers them all (a freshly started H100 machine's profile measured its CPU AdamW at 4.21 G
// params/s where such machines run it at 5.4-5.8; the plans it chose ran ~2% slower than those of
// a right profile). The memory-sharing part measures the same pass alone again seconds later (its
// samples alone sit 2-5% below the host part's on a quiet machine, being shorter): where they
// exceed the host part's by more than this factor, the host part was slowed, and is measured again.
inline constexpr double kCpuUpdateRatesAgree = 1.10;
bool cpu_updates_ran_slow(double host_part_alone, double sharing_part_alone);

// Each CPU rate of `kept` the larger of its own and `again`'s (noise only slows a pass).
void keep_faster_cpu_updates(HostProfile& kept, const HostProfile& again);

// Rates of the CPU AdamW (params/s) and of pinned copies (bytes/s of each direction), each alone
// and beside the other.
struct MemorySharingRates {
  double cpu_alone = 0.0, cpu_beside_copy = 0.0, cpu_beside_duplex = 0.0;
  double copy_alone = 0.0, copy_beside_cpu = 0.0;      // h2d alone on the link
  double duplex_alone = 0.0, duplex_beside_cpu = 0.0;  // h2d and d2h at once, per direction
  HostMemorySharing shares() const;                    // each rate beside over alone, in (0, 1]
};
MemorySharingRates measure_memory_sharing(Device& device, const ProfileOptions& options, double memory_bytes);

// Parameters of the CPU AdamW's probe arrays: options.cpu_adamw_params, at most 1/16 of RAM.
size_t cpu_adamw_probe_params(const ProfileOptions& options, double memory_bytes);

}  // namespace ferry
