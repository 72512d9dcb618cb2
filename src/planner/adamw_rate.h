// Parameters per second of the host's AdamW pass under a plan: the profile measures the fp32 pass
// (optim/cpu_adamw.h, DRAM-bound) and each lean format's (optim/lean_adamw.h); the plan's upload
// and optimizer state format pick which and change what it moves per parameter.
#pragma once

#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

// Per thread, the lean AdamW (optim/lean_kernel.cpp, vectorized) as the lent H200 machine's
// profile measured it on its 16 threads (profiler method 6, 2026-12-01: 2.10, 1.31 and 1.77 G
// params/s in all). One core of the 2-core development machine computes 2-2.5x as many per thread
// (fp32_q8 325 M, bf16c8_q8 190 M, bf16sr_q8 280 M, cpu_adamw_bench): the H200 host's threads share
// cores and DRAM. Used for profiles that did not time the lean pass (host.lean_adamw_params_per_s
// of 0: measured before profiler method 6), such as the stored H200 profiles (bench/profiles/).
inline constexpr double kLeanAdamWParamsPerThread[] = {
    0.0,    // fp32: measured by the profile
    131e6,  // fp32_q8
    82e6,   // bf16c8_q8
    111e6,  // bf16sr_q8
};

// fp32: the profile's rate (times 26/24 when ConvertOnUpload writes no bf16 copy). A lean format:
// the profile's rate of it where measured; otherwise the fp32 rate scaled by the DRAM traffic
// (26 / adamw_traffic_bytes_per_param: the roofline's gain), but never more than the lean kernel
// computes on the profile's threads.
double host_adamw_params_per_s(const HostProfile& host, const Plan& plan);

}  // namespace ferry
