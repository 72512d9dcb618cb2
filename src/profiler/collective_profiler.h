// Measures the collectives between a group's devices (planner/profile.h CollectiveProfile): the
// all-reduce bus bandwidth the planner charges the gradients' all-reduce and the weights'
// all-gather at (planner/collective_cost.h), and one small call's latency.
//
// Each rank issues its calls from a thread of its own (NCCL waits for the other ranks inside a
// call otherwise). A bf16 all-reduce of `bytes` is timed over `repeats` calls after one warm-up;
// bus bandwidth is NCCL's: 2 (N-1)/N x bytes / seconds per call. The latency is a 4-byte
// all-reduce's time, the mean of as many.
#pragma once

#include <cstddef>
#include <vector>

#include "device/collective.h"
#include "device/device.h"
#include "planner/profile.h"

namespace ferry {

// `collectives[r]` is rank r's handle on `devices[r]`'s compute stream. Allocates 2 x `bytes` on
// each device (the size is lowered to a quarter of the least free memory).
CollectiveProfile measure_collectives(const std::vector<Device*>& devices,
                                      const std::vector<Collective*>& collectives,
                                      size_t bytes = size_t{256} << 20, int repeats = 5);

}  // namespace ferry
