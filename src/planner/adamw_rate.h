// Parameters per second of the host's AdamW pass under a plan: the profile measures the fp32 pass
// (optim/cpu_adamw.h, DRAM-bound); the plan's upload and optimizer state format change what it
// moves per parameter.
#pragma once

#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

// Per thread, the lean AdamW (optim/lean_adamw.h; scalar code, its x86-64-v3 clone) as timed on
// one core of a 2-core development machine shared with other builds, 4M parameters, bf16
// gradients and copy: compute-bound, far from the DRAM roofline that bounds fp32's SIMD pass.
// Used until the profiler times the lean pass itself.
inline constexpr double kLeanAdamWParamsPerThread[] = {
    0.0,   // fp32: measured by the profile
    30e6,  // fp32_q8 (33 M/s measured)
    13e6,  // bf16c8_q8 (15 M/s)
    27e6,  // bf16sr_q8 (30 M/s)
};

// fp32: the profile's rate (times 26/24 when ConvertOnUpload writes no bf16 copy). A lean format:
// the fp32 rate scaled by the DRAM traffic (26 / adamw_traffic_bytes_per_param: the roofline's
// gain), but never more than the lean kernel computes on the profile's threads.
double host_adamw_params_per_s(const HostProfile& host, const Plan& plan);

}  // namespace ferry
