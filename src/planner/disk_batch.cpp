#include "planner/disk_batch.h"

#include <fmt/format.h>

#include <algorithm>

namespace ferry {

std::vector<DiskBatchOption> disk_batch_options(const ModelConfig& config, const ModelLayout& layout,
                                                const MachineProfile& profile, const PlanRequest& request,
                                                size_t max_options) {
  std::vector<DiskBatchOption> options;
  if (request.disk_budget == 0) return options;
  PlanRequest r = request;
  for (size_t i = 0; i < max_options; ++i) {
    r.global_batch *= 2;  // a multiple of a forced micro-batch when the request's is
    DiskBatchOption o;
    o.global_batch = r.global_batch * std::max<int64_t>(1, r.devices);  // the step's, every device's share
    // No plan under these budgets: a larger step only needs more (the list ends).
    if (const std::optional<Candidate> c = best_plan_if_any(config, layout, profile, r)) {
      o.fits = true;
      o.disk_layers = c->plan.disk_units();
      o.step_seconds = c->prediction.step_seconds;
      o.tokens_per_second = c->prediction.tokens_per_second;
      o.disk_bound = c->prediction.bottleneck == Lane::Disk;
    }
    options.push_back(o);
    if (!o.fits || !o.disk_bound) break;
  }
  return options;
}

std::vector<std::string> describe_disk_batch_options(const std::vector<DiskBatchOption>& options,
                                                     int64_t seq_len) {
  std::vector<std::string> lines;
  for (const DiskBatchOption& o : options) {
    const std::string head =
        fmt::format("global_batch {} ({} tokens/step): ", o.global_batch, o.global_batch * seq_len);
    if (!o.fits)
      lines.push_back(head +
                      "no plan fits these budgets (a larger step's boundary activations need host memory "
                      "that the optimizer state on disk can no longer free)");
    else
      lines.push_back(head + fmt::format("{:.3g} s/step, {:.0f} tokens/s, {} layers' state on disk, {}",
                                         o.step_seconds, o.tokens_per_second, o.disk_layers,
                                         o.disk_bound ? "still disk-bound" : "the disk hidden"));
  }
  return lines;
}

}  // namespace ferry
