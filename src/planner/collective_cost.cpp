#include "planner/collective_cost.h"

#include <fmt/format.h>

namespace ferry {

CollectiveRate collective_rate(const MachineProfile& profile) {
  if (profile.collective.bus_bytes_per_s > 0)
    return {profile.collective.bus_bytes_per_s, profile.collective.latency_s, true};
  return {kFallbackBusBytesPerSecond, kFallbackCollectiveLatencySeconds, false};
}

double all_reduce_seconds(double bytes, int64_t devices, const CollectiveRate& rate) {
  if (devices <= 1) return 0.0;
  const double n = static_cast<double>(devices);
  return rate.latency_s + 2.0 * (n - 1.0) / n * bytes / rate.bus_bytes_per_s;
}

double all_gather_seconds(double bytes, int64_t devices, const CollectiveRate& rate) {
  if (devices <= 1) return 0.0;
  const double n = static_cast<double>(devices);
  return rate.latency_s + (n - 1.0) / n * bytes / rate.bus_bytes_per_s;
}

std::string describe_collectives(const MachineProfile& profile, int64_t devices) {
  if (devices <= 1) return {};
  const CollectiveRate rate = collective_rate(profile);
  return fmt::format(
      "collectives: {} devices, all-reduce bus bandwidth {:.0f} GB/s, latency {:.0f} us ({}); each device "
      "uploads 1/{} of a unit and all-gathers the rest, all-reduces each gradient and sends 1/{} down",
      devices, rate.bus_bytes_per_s / 1e9, rate.latency_s * 1e6,
      rate.measured ? "measured"
                    : "FALLBACK, not measured: the profile has no collective rate; `ferry train gpus=N` "
                      "measures it on the devices before planning",
      devices, devices);
}

}  // namespace ferry
