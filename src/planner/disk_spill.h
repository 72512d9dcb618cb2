// How much optimizer state the plan search puts in the disk tier, and which units' (pure
// functions; planner/search.h calls them, `ferry plan` prints describe_disk_tier).
//
// The disk is the slowest tier by far (~2 GB/s against ~100 GB/s of DRAM), so the search puts
// state there only when the host budget cannot hold it, and then as little as fits: for each
// candidate plan that misses the host budget, the fewest layers whose state on disk brings it
// under, within the disk budget. A unit's state is read before its CPU update and written back
// after it, every step: 2 x b bytes/param cross the disk per step (b = 12 for exact fp32 state,
// 4.125 to 6.125 for a lean format: optim/state_format.h, each array padded for O_DIRECT), so a
// step hides them under its compute only with enough tokens (disk_hiding_tokens).
//
// Which layers: host-updated decoder layers (the engine's tier holds those: engine/unit_updater.h)
// with host-shadow uploads, spread evenly over the layers. Between two disk layers the CPU updates
// RAM layers, and that time is the disk's to read the next disk layer ahead: spread out, every disk
// layer gets the same share of it, where a block of consecutive disk layers would leave the
// updater waiting on the disk for all but the first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

// RAM buffers of the tier: the unit being updated, and the next one read ahead (into the buffer of
// the unit before, once its write-back is done). A third would let the read of the next unit start
// before that write-back, but the disk does the write and the read in turn either way, and the
// tier is used only where RAM is short: the buffer (a whole layer's state: 2.6 GB for an 8B
// layer) is better spent keeping one more layer's state in RAM.
inline constexpr int64_t kDiskSlots = 2;

// The units whose state the disk tier could hold under `plan`, in index order.
std::vector<size_t> disk_eligible_units(const ModelLayout& layout, const Plan& plan);

// `plan` with the state of `count` of its eligible units on disk (spread evenly), kDiskSlots
// buffers, and no directory (the caller that knows the config sets Plan::disk_dir). count 0:
// every unit's state in RAM.
Plan with_state_on_disk(const ModelLayout& layout, Plan plan, int64_t count);

// Tokens per step at which the plan's disk traffic hides under the step's GPU compute: the disk's
// seconds per step (each disk unit's state read and written back once, at the profile's rates)
// over the compute's seconds per token in `prediction`. The rule of thumb b·F/(6·rate) for
// b bytes/param streamed, with the GPU's measured rate for F. 0 without a disk tier.
double disk_hiding_tokens(const ModelLayout& layout, const Plan& plan, const MachineProfile& profile,
                          const Prediction& prediction, int64_t tokens);

// The smallest global_batch (sequences of seq_len, a multiple of micro_batch) with at least
// `hiding_tokens` tokens per step: 235,028 tokens at seq_len 2048, micro-batch 2 → 116. 0 when
// either is unknown. To first order, since the step's compute grows with its tokens and the disk's
// bytes do not; the boundaries a larger step keeps are the plan's to fit again.
int64_t disk_hiding_global_batch(double hiding_tokens, int64_t seq_len, int64_t micro_batch);

// `ferry plan`'s lines about the tier: where the state is (RAM, disk: how many layers), why (the
// host budget, or `forced` by disk_layers), the bytes streamed per step and the disk's time against
// the GPU's compute, and the tokens per step that would hide it (with `seq_len` > 0, also as a
// global_batch) -- saying "disk-bound" when this step has fewer. None without a disk tier.
std::vector<std::string> describe_disk_tier(const ModelLayout& layout, const Plan& plan,
                                            const MachineProfile& profile, const Prediction& prediction,
                                            int64_t tokens, size_t host_budget, bool forced,
                                            int64_t seq_len = 0);

}  // namespace ferry
