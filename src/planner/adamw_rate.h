// Parameters per second of the host's AdamW pass under a plan: the profile measures the fp32 pass
// (optim/cpu_adamw.h, DRAM-bound) and each lean format's (optim/lean_adamw.h); the plan's upload
// and optimizer state format pick which and change what it moves per parameter.
#pragma once

#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

// Per thread, the lean AdamW (optim/lean_kernel.cpp, vectorized; its AVX-512 clone), timed by
// cpu_adamw_bench on one core of a 2-core development machine (AMD EPYC, Zen 4) in CPU time,
// 16M parameters, bf16 gradients and copy: compute-bound there, at a third of the DRAM rate its
// traffic would allow. Used for profiles that did not time the lean pass (host.
// lean_adamw_params_per_s of 0: measured before profiler method 6).
inline constexpr double kLeanAdamWParamsPerThread[] = {
    0.0,    // fp32: measured by the profile
    300e6,  // fp32_q8 (325-330 M measured)
    180e6,  // bf16c8_q8 (190-200 M)
    260e6,  // bf16sr_q8 (280-285 M)
};

// fp32: the profile's rate (times 26/24 when ConvertOnUpload writes no bf16 copy). A lean format:
// the profile's rate of it where measured; otherwise the fp32 rate scaled by the DRAM traffic
// (26 / adamw_traffic_bytes_per_param: the roofline's gain), but never more than the lean kernel
// computes on the profile's threads.
double host_adamw_params_per_s(const HostProfile& host, const Plan& plan);

}  // namespace ferry
