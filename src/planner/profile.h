// A machine profile: the measured rates from which the cost model predicts a plan's step time
// (DESIGN.md §3, planner/: profile → cost model → search). Measured once per machine and model
// shape (engine/machine_profiler), cached as JSON; `profile: FILE` plans for another machine from
// its saved profile (bench/profiles/ holds the lent H200's). Pure data: no device, no clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "model/model_config.h"
#include "planner/stream_simulator.h"

namespace ferry {

// Seconds for one micro-chunk of `tokens` tokens: a fixed part (launches, small kernels) and a
// part proportional to the tokens. Attention's cost per token grows with the sequence length, so a
// LinearTime belongs to one seq_len (MachineProfile::seq_len).
struct LinearTime {
  double fixed_s = 0.0;
  double per_token_s = 0.0;
  double at(int64_t tokens) const { return fixed_s + per_token_s * static_cast<double>(tokens); }
};

// The compute stream, for the model shape named by MachineProfile::shape_key.
struct ComputeProfile {
  LinearTime embedding_forward;
  LinearTime embedding_backward;
  LinearTime layer_forward;   // one decoder layer
  LinearTime layer_backward;  // one decoder layer's backward, including the recompute of its forward
  // The backward of a layer that kept its internals (Recompute::NormsActivation). Zero in files
  // that did not measure it: the cost model then takes layer_backward less the recompute's share of
  // layer_forward.
  LinearTime layer_backward_kept;
  // The backward of a layer that kept everything its backward reads (Recompute::Nothing: the
  // norms' outputs and the activation too). Zero in files that did not measure it: the cost model
  // then takes the passes it skips at the device memory's rate.
  LinearTime layer_backward_kept_all;
  // Where no micro-chunk of whole sequences fit the device, the layer was timed with its token-local
  // tensors in tiles of this many tokens, and its times taken back to the untiled layer's as the
  // planner charges a tile (planner/sequence_tile.h); 0: timed untiled.
  int64_t layer_tile_tokens = 0;
  // ... and with its attention in this many groups of KV heads, its times taken back to one
  // group's as the planner charges groups (planner/head_groups.h); 1: one group.
  int64_t layer_head_groups = 1;
  // The layer's forward (its backward) ran faster with ferry's own attention kernels than with the
  // library's fused attention (Ops::has_library_attention), so its times are those of the
  // attention chosen for each direction, and a run on this machine takes the same
  // (train/profile_cache.h attention_choice). false: the library's, or no library to choose (the
  // simulated device, a machine without cuDNN, files of profiler methods before 9).
  bool own_attention_forward = false;
  bool own_attention_backward = false;
  LinearTime head;  // final norm + LM head + loss, forward and backward in one fused pass
  // The head when its weight gradient accumulates in fp32: where the head (or, tied, the embedding)
  // keeps its optimizer on the device, or everything does. Equal to `head` where gradients are
  // fp32 anyway (the simulated device) and in files that did not measure it.
  LinearTime head_f32_grads;
  // The two above with the weight gradient's product taken over kHeadWeightGradChunks logits
  // chunks at once (Plan::head_weight_grad_chunks). Equal to them where not measured: on the
  // simulated device (its ops have no logits chunks), where the device had no room for the chunks'
  // logits, and in files of profiler methods before 8.
  LinearTime head_grouped;
  LinearTime head_f32_grads_grouped;
  double gpu_adamw_params_per_s = 0.0;  // GPU AdamW (with its share of the gradient-norm pass)
  // The squared-norm partials of a bf16 gradient on the device (clip.h's chunks), which the engine
  // computes for every host-updated unit before its gradient leaves.
  double grad_norm_params_per_s = 0.0;
};

// Device memory traffic of the GPU AdamW per parameter (optim/gpu_adamw.h): its measured rate times
// this is the device memory's rate, which memory-bound passes the profile does not time run at.
constexpr double kGpuAdamWBytesPerParam = 30.0;
// Host DRAM traffic of the CPU AdamW pass per parameter, as step_program.cpp already counts it for
// the pass with the bf16 copy (26 bytes; 24 without it): its rate times this is what the pass
// takes of the host's memory bandwidth, which the disk tier's DMA shares.
constexpr double kCpuAdamWBytesPerParam = 26.0;

// Copies between pinned host memory and the device.
struct TransferProfile {
  double h2d_bytes_per_s = 0.0;         // alone
  double d2h_bytes_per_s = 0.0;         // alone
  double duplex_h2d_bytes_per_s = 0.0;  // each direction while the other runs too
  double duplex_d2h_bytes_per_s = 0.0;
  double latency_s = 0.0;  // per copy, on top of bytes / rate
};

struct HostProfile {
  int threads = 0;  // the CPU AdamW's worker threads
  double cpu_adamw_params_per_s =
      0.0;  // fused pass: bf16 gradient + fp32 master/m/v → master/m/v + bf16 weights
  // The lean AdamW's pass (optim/lean_adamw.h) per lean format, indexed by OptimizerStateFormat
  // (fp32's entry unused); 0: not measured (profiles from before method 6), the planner then
  // assumes its per-thread rate (planner/adamw_rate.h).
  double lean_adamw_params_per_s[4] = {};
  double memory_bytes = 0.0;           // physical RAM
  double disk_read_bytes_per_s = 0.0;  // 0: not measured (no disk tier in this profile)
  double disk_write_bytes_per_s = 0.0;
  // The CPU AdamW and pinned copies beside each other (host DRAM is shared). Profiles of format 2
  // did not measure it: factors of 1, memory_sharing_measured false.
  HostMemorySharing memory_sharing;
  bool memory_sharing_measured = false;
};

// Collectives between the devices of a host (planner/collective_cost.h): NCCL's all-reduce bus
// bandwidth as nccl-tests reports it, measured on a machine of several GPUs. 0: not measured (one
// GPU, or a profile from before it); the planner then uses a stated fallback.
struct CollectiveProfile {
  double bus_bytes_per_s = 0.0;
  double latency_s = 0.0;
  int devices = 0;  // how many devices the measurement spanned
};

struct MachineProfile {
  // 2: grad_norm_params_per_s; the host no longer sums norms. 3: host.memory_sharing (format 2
  // still loads, without it).
  static constexpr int kVersion = 3;
  std::string device_name;  // "NVIDIA H200", "sim"
  // The device memory the measuring run had: its `gpu_memory` budget where it set one. A cached
  // profile takes the loading run's (profile_cache.h).
  double device_memory_bytes = 0.0;
  // What a run without `gpu_memory` gets on the measured machine (Device::uncapped_memory): the
  // whole card's free memory even when the measuring run had a budget. 0: not recorded (files from
  // before it was).
  double device_uncapped_memory_bytes = 0.0;
  std::string shape_key;  // model_shape_key() of the shape the compute times were measured for
  std::string kernels;    // Ops::kernels() of the measurement ("" in files from before it was recorded)
  // How the measurement was taken (profiler/machine_profiler.h's kProfilerMethod; 0 in files from
  // before it was recorded). A cache holding another method's profile is measured again.
  int method = 0;
  int64_t seq_len = 0;
  DType weight_dtype = DType::BF16;
  ComputeProfile compute;
  TransferProfile transfer;
  HostProfile host;
  CollectiveProfile collective;  // optional in every version
};

// Names what the compute times depend on: layer and vocabulary shape, sequence length and the
// dtype of the weights on the device. Equal keys ⇒ a cached profile can be reused.
std::string model_shape_key(const ModelConfig& config, int64_t seq_len, DType weight_dtype);

// JSON (a versioned object with the fields above). load_profile validates every field and throws
// ferry::Error naming the file and the field.
void save_profile(const std::filesystem::path& path, const MachineProfile& profile);
MachineProfile load_profile(const std::filesystem::path& path);
nlohmann::json profile_to_json(const MachineProfile& profile);
MachineProfile profile_from_json(const nlohmann::json& json, const std::string& source);

}  // namespace ferry
