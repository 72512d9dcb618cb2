// What larger steps would buy a disk-bound plan (pure functions; `ferry plan` prints them).
//
// A disk layer's state crosses the disk twice a step whatever the step's tokens, so more tokens per
// step hide it (planner/disk_spill.h disk_hiding_tokens). But a larger step keeps more boundary
// activations, which leave the GPU for pinned host memory, which the host budget pays for with more
// optimizer state on disk: tokens per step, the state on disk and the boundaries kept move together.
// The search answers for each global_batch; these are its answers at doubling global batches under
// the same budgets, so the user sees which step size the disk allows and what it gains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/profile.h"
#include "planner/search.h"

namespace ferry {

struct DiskBatchOption {
  int64_t global_batch = 0;
  bool fits = false;  // the search found a plan under the request's budgets
  int64_t disk_layers = 0;
  double step_seconds = 0.0, tokens_per_second = 0.0;
  bool disk_bound = false;  // the plan's bottleneck is still the disk
};

// The best plan at global batches 2x, 4x, ... the request's (multiples of a forced micro-batch),
// until one is no longer disk-bound, none fits, or `max_options` are tried. Nothing when the
// request has no disk budget.
std::vector<DiskBatchOption> disk_batch_options(const ModelConfig& config, const ModelLayout& layout,
                                                const MachineProfile& profile, const PlanRequest& request,
                                                size_t max_options = 5);

// One line per option for `ferry plan`: "global_batch 32 (65536 tokens/step): 34.4 s/step,
// 1906 tokens/s, 13 layers' state on disk, disk-bound", or "... no plan fits these budgets".
std::vector<std::string> describe_disk_batch_options(const std::vector<DiskBatchOption>& options,
                                                     int64_t seq_len);

}  // namespace ferry
