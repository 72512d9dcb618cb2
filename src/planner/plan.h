// A Plan: everything the engine needs to know to run a step, decided before the first step
// (DESIGN.md §3: the planner chooses, the engine executes and never decides by itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry {

// Where a unit's parameters (and optimizer state) live during training.
enum class UnitPlacement {
  Streamed,        // fp32 state on the host; weights uploaded into a GPU slot when needed
  ResidentParams,  // weights stay on the GPU (uploaded after each update); state on the host
  // Weights, gradients, fp32 master, m and v stay on the GPU and GPU AdamW updates them: no PCIe
  // traffic and no CPU work for this unit. (Every unit so placed = Plan::optimizer_on_gpu.)
  ResidentWithOptimizer,
};

// How a streamed or resident unit's new weights reach the GPU after a CPU update.
enum class WeightUpload {
  // The CPU AdamW also writes the bf16 weights into a pinned host shadow (2 bytes/param of host
  // memory); the upload moves 2 bytes/param.
  HostShadow,
  // The fp32 masters themselves are pinned and uploaded; the GPU converts them into the slot
  // (no shadow: 2 bytes/param less host memory, 2 bytes/param more PCIe traffic per upload).
  ConvertOnUpload,
};

// Where a layer's boundary activation (its input) waits between forward and backward.
enum class ActivationPlacement {
  KeepOnGpu,
  OffloadToHost,  // d2h after the forward, h2d prefetch before the backward
};

enum class UpdateSchedule {
  // Gradients land on the host during backward; once the step's global norm is known (clipping),
  // units are updated layer 0 first, overlapped with the next step's forward.
  AfterBackward,
  // Without clipping: each unit is updated as soon as its gradient lands, during backward.
  DuringBackward,
};

struct Plan {
  int64_t micro_batch = 1;                   // sequences per micro-chunk
  int64_t gpu_slots = 2;                     // slots for streamed units (>= 2 for overlap)
  std::vector<UnitPlacement> units;          // one per unit of the model layout
  std::vector<ActivationPlacement> activations;  // one per decoder layer (+1: the head's input)
  UpdateSchedule update = UpdateSchedule::AfterBackward;
  DType weight_dtype = DType::BF16;          // weights on the GPU (F32 on the simulated device)
  DType grad_dtype = DType::BF16;            // gradients on the GPU and across PCIe
  WeightUpload weight_upload = WeightUpload::HostShadow;
  // The whole model and its optimizer on the GPU: every unit resident, fp32 masters, m and v in
  // device memory, clipping and AdamW on the GPU; the host only reads the loss. Needs a native
  // (CUDA) device.
  bool optimizer_on_gpu = false;

  std::string describe() const;
};

const char* placement_name(UnitPlacement placement);
const char* activation_name(ActivationPlacement placement);
const char* update_name(UpdateSchedule schedule);
const char* weight_upload_name(WeightUpload upload);

}  // namespace ferry
