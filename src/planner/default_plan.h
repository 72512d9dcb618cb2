// A plan from simple rules, until the cost-model search chooses (DESIGN.md §3, planner/):
//   1. every unit streamed through `slots` GPU slots (a tied embedding stays resident: the head
//      uses it too);
//   2. boundary activations stay on the GPU, the last layers first (the backward needs them
//      first), while they fit; the rest go to pinned host memory;
//   3. with room left, units become resident, layers from the last one down (each saves two
//      uploads per step), keeping `headroom` of the budget free;
//   4. updates after the backward when clipping is on (exact global norm), else during it;
//   0. before all that: when the whole model, its fp32 optimizer state and all activations fit,
//      everything stays on the GPU and AdamW runs there (no PCIe traffic at all).
// The user may force the slots, the activation placement, the resident count, how many of the
// resident layers also keep their optimizer on the GPU, and how weights are uploaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "io/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

struct PlanRequest {
  int64_t micro_batch = 1;
  int64_t seq_len = 2048;
  int64_t chunks = 1;                 // micro-chunks per step
  size_t device_budget = 0;           // bytes the engine may allocate
  double headroom = 0.05;             // fraction of the budget left free
  DType weight_dtype = DType::BF16;
  DType grad_dtype = DType::BF16;
  bool clipping = true;
  std::optional<int64_t> slots;                 // forced number of slots
  std::optional<bool> offload_activations;      // forced: all on the host (true) or all on the GPU (false)
  std::optional<int64_t> resident_layers;       // forced number of resident layers (from the last)
  // Forced: of the resident layers, this many (from the last) are ResidentWithOptimizer.
  std::optional<int64_t> gpu_optimizer_layers;
  WeightUpload weight_upload = WeightUpload::HostShadow;
  bool allow_optimizer_on_gpu = false;          // may choose the everything-on-the-GPU plan (CUDA)
};

// Throws ferry::Error, with the smallest budget that would work, when nothing fits.
Plan default_plan(const ModelConfig& config, const ModelLayout& layout, const PlanRequest& request);

}  // namespace ferry
