// Parameters per second of the host's AdamW pass under a plan: the profile measures the fp32 pass
// (optim/cpu_adamw.h, DRAM-bound) and each lean format's (optim/lean_adamw.h); the plan's upload
// and optimizer state format pick which and change what it moves per parameter.
#pragma once

#include "planner/plan.h"
#include "planner/profile.h"

namespace ferry {

// Per thread, the lean AdamW (optim/lean_kernel.cpp, whole blocks in place, one 32-bit hash per
// element, the threads taking pieces from a shared counter) as the lent H200 machine's host
// measured it on its 16 threads (cpu_adamw_bench, 2026-12-02, call 14a: 4.50, 3.03 and 4.74 G
// params/s in all; with one static slice per thread, call 11b, 3.49, 2.32 and 3.43: a quarter of
// the threads' time went waiting for the slowest). One core of the 2-core development machine
// computes ~1.8x as many per thread-second (fp32_q8 525 M, bf16c8_q8 320 M, bf16sr_q8 519 M; the
// H200 host 294, 193 and 296 M): its 16 vCPUs share DRAM and, likely, physical cores. Used for
// profiles that did not time the lean pass (host.lean_adamw_params_per_s of 0: measured before
// profiler method 6), such as the stored H200 profiles (bench/profiles/).
inline constexpr double kLeanAdamWParamsPerThread[] = {
    0.0,    // fp32: measured by the profile
    281e6,  // fp32_q8
    189e6,  // bf16c8_q8
    296e6,  // bf16sr_q8
};

// fp32: the profile's rate (times 26/24 when ConvertOnUpload writes no bf16 copy). A lean format:
// the profile's rate of it where measured; otherwise the fp32 rate scaled by the DRAM traffic
// (26 / adamw_traffic_bytes_per_param: the roofline's gain), but never more than the lean kernel
// computes on the profile's threads.
double host_adamw_params_per_s(const HostProfile& host, const Plan& plan);

}  // namespace ferry
