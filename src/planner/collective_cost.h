// What the collectives between the devices of a group cost (engine/device_share.h), from the
// profile's measured bus bandwidth, or, until one is measured, from a stated fallback.
//
// Bus bandwidth is NCCL's (nccl-tests' "busbw"): the rate at which each link moves a collective's
// bytes, the same number for every collective and device count. An all-reduce of B bytes over N
// devices takes 2 (N-1)/N x B / busbw, an all-gather of a B-byte buffer (N shards) (N-1)/N x B /
// busbw, each plus one latency.
//
// Worked example: Llama-3.1-8B's decoder layer is 218 M params, 436 MB of bf16 gradient; over 2
// GPUs at the fallback's 100 GB/s its all-reduce takes 4.4 ms, its weights' all-gather 2.2 ms per
// upload; at 65,536 tokens a step per GPU a layer's backward computes for ~170 ms.
#pragma once

#include <string>

#include "planner/profile.h"

namespace ferry {

// Assumed until a run of several devices measures them (profiler/collective_profiler.h): an all-reduce bus
// bandwidth below what NVLink-connected H100/H200 reach (~350-450 GB/s) and above PCIe peer copies (~25-50
// GB/s).
constexpr double kFallbackBusBytesPerSecond = 100e9;
constexpr double kFallbackCollectiveLatencySeconds = 20e-6;

struct CollectiveRate {
  double bus_bytes_per_s = 0.0;
  double latency_s = 0.0;
  bool measured = false;
};
CollectiveRate collective_rate(const MachineProfile& profile);

double all_reduce_seconds(double bytes, int64_t devices, const CollectiveRate& rate);
// `bytes`: the whole gathered buffer.
double all_gather_seconds(double bytes, int64_t devices, const CollectiveRate& rate);

// For `ferry plan`: "collectives: 2 devices, all-reduce bus bandwidth 100 GB/s (fallback, not
// measured: ...)"; empty for one device.
std::string describe_collectives(const MachineProfile& profile, int64_t devices);

}  // namespace ferry
