#include "planner/disk_spill.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/byte_size.h"
#include "optim/state_format.h"
#include "planner/disk_tier_layout.h"

namespace ferry {

std::vector<size_t> disk_eligible_units(const ModelLayout& layout, const Plan& plan) {
  std::vector<size_t> units;
  if (plan.optimizer_on_gpu() || plan.weight_upload != WeightUpload::HostShadow) return units;
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (layout.units[u].kind == UnitKind::Layer && !updated_on_device(plan.units[u])) units.push_back(u);
  return units;
}

Plan with_state_on_disk(const ModelLayout& layout, Plan plan, int64_t count) {
  const std::vector<size_t> eligible = disk_eligible_units(layout, plan);
  const size_t k = static_cast<size_t>(std::clamp<int64_t>(count, 0, static_cast<int64_t>(eligible.size())));
  plan.state_on_disk.assign(layout.units.size(), false);
  plan.disk_slots = k > 0 ? kDiskSlots : 0;
  // The i-th of k at the middle of its share of the eligible layers: 1 of 8 → the 4th; 2 of 8 →
  // the 2nd and 6th; 8 of 8 → all.
  for (size_t i = 0; i < k; ++i) plan.state_on_disk[eligible[(2 * i + 1) * eligible.size() / (2 * k)]] = true;
  return plan;
}

namespace {

double disk_seconds(const DiskTierLayout& d, const MachineProfile& profile) {
  if (d.file_bytes == 0 || profile.host.disk_read_bytes_per_s <= 0 ||
      profile.host.disk_write_bytes_per_s <= 0)
    return 0.0;
  const double bytes = static_cast<double>(d.file_bytes);
  return bytes / profile.host.disk_read_bytes_per_s + bytes / profile.host.disk_write_bytes_per_s;
}

size_t disk_params(const ModelLayout& layout, const DiskTierLayout& d) {
  size_t n = 0;
  for (size_t u : d.order) n += static_cast<size_t>(layout.units[u].numel);
  return std::max<size_t>(n, 1);
}

}  // namespace

int64_t disk_hiding_global_batch(double hiding_tokens, int64_t seq_len, int64_t micro_batch) {
  if (hiding_tokens <= 0 || seq_len <= 0) return 0;
  const int64_t m = std::max<int64_t>(micro_batch, 1);
  const auto sequences = static_cast<int64_t>(std::ceil(hiding_tokens / static_cast<double>(seq_len)));
  return (sequences + m - 1) / m * m;
}

double disk_hiding_tokens(const ModelLayout& layout, const Plan& plan, const MachineProfile& profile,
                          const Prediction& prediction, int64_t tokens) {
  const double disk = disk_seconds(disk_tier_layout(layout, plan), profile);
  const double compute = prediction.busy[static_cast<int>(Lane::Compute)];
  if (disk <= 0 || compute <= 0 || tokens <= 0) return 0.0;
  return std::ceil(disk / (compute / static_cast<double>(tokens)));
}

std::vector<std::string> describe_disk_tier(const ModelLayout& layout, const Plan& plan,
                                            const MachineProfile& profile, const Prediction& prediction,
                                            int64_t tokens, size_t host_budget, bool forced,
                                            int64_t seq_len) {
  std::vector<std::string> lines;
  const DiskTierLayout d = disk_tier_layout(layout, plan);
  if (d.order.empty()) return lines;
  size_t state = 0;
  for (const auto& unit : layout.units)
    state += state_bytes(plan.optimizer_state, static_cast<size_t>(unit.numel));
  const size_t eligible = disk_eligible_units(layout, plan).size();
  lines.push_back(fmt::format(
      "optimizer state: {} in RAM, {} on disk ({} of {} layers that could go there, spread evenly), through "
      "{} RAM buffers of {}; why: {}",
      format_bytes(state - d.file_bytes), format_bytes(d.file_bytes), d.order.size(), eligible, d.slots,
      format_bytes(d.slot_bytes),
      forced ? std::string("disk_layers forces it")
             : fmt::format("the host budget ({}) cannot hold it all, and this is the least on disk that fits",
                           format_bytes(host_budget))));
  const double seconds = disk_seconds(d, profile);
  const double compute = prediction.busy[static_cast<int>(Lane::Compute)];
  lines.push_back(fmt::format(
      "disk traffic per step: {} read + {} written back ({:.3g} bytes/param of {} state) = {:.3g} s at the "
      "profile's {:.2f} GB/s read, {:.2f} GB/s write, against {:.3g} s of GPU compute; the disk is busy "
      "{:.3g} s of the {:.3g} s step (the updater's DRAM share of it is in the CPU's time)",
      format_bytes(d.file_bytes), format_bytes(d.file_bytes),
      2.0 * static_cast<double>(d.file_bytes) / static_cast<double>(disk_params(layout, d)),
      state_format_name(plan.optimizer_state), seconds, profile.host.disk_read_bytes_per_s / 1e9,
      profile.host.disk_write_bytes_per_s / 1e9, compute, prediction.busy[static_cast<int>(Lane::Disk)],
      prediction.step_seconds));
  const double hiding = disk_hiding_tokens(layout, plan, profile, prediction, tokens);
  if (hiding <= 0) return lines;
  const int64_t global = disk_hiding_global_batch(hiding, seq_len, plan.micro_batch);
  const std::string batch =
      global > 0 ? fmt::format(" (global_batch >= {} at seq_len {})", global, seq_len) : std::string();
  if (hiding > static_cast<double>(tokens))
    lines.push_back(fmt::format(
        "disk-bound: the step waits {:.3g} s for the disk beyond its compute; the disk hides under the GPU's "
        "compute at >= {:.0f} tokens/step{}, this step has {}: raise global_batch (or seq_len), give more "
        "host_memory (fewer layers on disk), or use a lean optimizer_state (fewer bytes/param to stream)",
        seconds - compute, hiding, batch, tokens));
  else
    lines.push_back(
        fmt::format("the disk hides under the GPU's compute: that needs >= {:.0f} tokens/step{}, "
                    "this step has {}",
                    hiding, batch, tokens));
  return lines;
}

}  // namespace ferry
