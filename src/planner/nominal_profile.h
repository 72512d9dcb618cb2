// A machine profile from nominal rates instead of measurements: the lent H200 machine's numbers of
// DESIGN.md §5 turned into per-layer times by counting FLOPs. For planning where no measured
// profile is at hand (a quick `ferry plan` for a machine like that one, tests at real shapes); a
// measured profile (profiler/machine_profiler.h, `profile: FILE`) is always better, and `ferry plan`
// says which one it used.
//
// Per token of a sequence of S tokens, for a layer with P weight parameters and q_dim = heads x
// head_dim: forward 2P FLOPs in the projections and 2 S q_dim in causal attention (QK^T and PV,
// 2 x q_dim x S/2 each); the backward with its recompute is 3x the forward (recompute 1x, then
// the two gradient GEMMs per forward GEMM 2x). Llama-3.1-8B at S = 8192: P = 218 M, so 436 MFLOP +
// 2 x 8192 x 4096 = 67 MFLOP → 503 MFLOP per token forward; at 65% of 776 TFLOP/s = 504 TFLOP/s,
// 1.0 ns per token, 8.2 ms for a chunk of 8192 tokens (plus 0.1 ms of fixed launch costs).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/model_config.h"
#include "planner/profile.h"

namespace ferry {

struct NominalRates {
  double gemm_flops_per_s = 776e12 * 0.65;  // bf16, large shapes, at the efficiency of whole layers
  double hbm_bytes_per_s = 4.0e12;          // memory-bound kernels (embedding)
  double h2d_bytes_per_s = 55e9, d2h_bytes_per_s = 55e9;
  double duplex_h2d_bytes_per_s = 50.5e9, duplex_d2h_bytes_per_s = 50.5e9;  // 101 GB/s both ways
  double copy_latency_s = 10e-6;
  double cpu_adamw_params_per_s = 4.1e9;  // PyTorch's fused CPU AdamW on 16 cores
  // GPU AdamW: 28 bytes per parameter (bf16 gradient in, fp32 master/m/v in and out, bf16 weight
  // out) at ~70% of the HBM rate.
  double gpu_adamw_params_per_s = 100e9;
  double launch_s = 5e-6;  // fixed cost per kernel
  int threads = 16;
  double memory_bytes = 128.0 * 1073741824.0;  // the lent machine's RAM
  // Its ~64 GiB virtio volume through io_uring with O_DIRECT (DESIGN.md §5).
  double disk_read_bytes_per_s = 1.89e9, disk_write_bytes_per_s = 2.35e9;
};

MachineProfile nominal_profile(const ModelConfig& config, int64_t seq_len, DType weight_dtype,
                               const NominalRates& rates = {});

}  // namespace ferry
