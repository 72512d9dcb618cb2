#include "planner/disk_tier_layout.h"

#include <algorithm>

#include "io/uring_file.h"
#include "optim/state_arrays.h"

namespace ferry {

namespace {

size_t aligned(size_t bytes) {
  const size_t a = UringFile::kAlignment;
  return (bytes + a - 1) / a * a;
}

}  // namespace

DiskTierLayout disk_tier_layout(const ModelLayout& layout, const Plan& plan) {
  DiskTierLayout d;
  const size_t units = layout.units.size();
  d.region_offset.assign(units, 0);
  d.region_bytes.assign(units, 0);
  d.array_offset.resize(units);
  d.array_bytes.resize(units);
  if (plan.disk_units() == 0) return d;
  for (size_t u = 0; u < units && u < plan.state_on_disk.size(); ++u)
    if (plan.state_on_disk[u]) d.order.push_back(u);
  if (plan.update == UpdateSchedule::DuringBackward) std::reverse(d.order.begin(), d.order.end());
  for (size_t u : d.order) {
    size_t region = 0;
    for (size_t bytes :
         unit_state_array_bytes(plan.optimizer_state, static_cast<size_t>(layout.units[u].numel))) {
      d.array_offset[u].push_back(region);
      d.array_bytes[u].push_back(bytes);
      region += aligned(bytes);
    }
    d.region_offset[u] = d.file_bytes;
    d.region_bytes[u] = region;
    d.file_bytes += region;
    d.slot_bytes = std::max(d.slot_bytes, region);
  }
  d.slots = static_cast<size_t>(std::max<int64_t>(plan.disk_slots, 0));
  return d;
}

}  // namespace ferry
