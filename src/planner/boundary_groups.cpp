#include "planner/boundary_groups.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

BoundaryGroups boundary_groups(const std::vector<ActivationPlacement>& activations, bool one_staging_buffer) {
  const size_t n = activations.size();
  BoundaryGroups g;
  g.staging.assign(n, -1);
  g.recompute_buffer.assign(n, -1);
  g.group_base.assign(n, 0);
  g.recomputed.assign(n, false);
  FERRY_CHECK(n == 0 || activations[0] != ActivationPlacement::Recompute, "plan",
              "boundary 0 (the embedding's output) cannot be recomputed: keep it on the GPU or the host");
  const auto offloaded_at = [&](size_t b) { return boundary_on_host(activations[b]); };
  for (size_t b = 0; b < n; ++b) {
    if (offloaded_at(b)) g.staging_buffers = std::max<int64_t>(g.staging_buffers, 1);
    if (offloaded_at(b) && (!one_staging_buffer || (b + 1 < n && offloaded_at(b + 1)))) g.staging_buffers = 2;
  }
  int64_t offloaded = 0, base = 0;
  for (size_t b = 0; b < n; ++b) {
    const ActivationPlacement a = activations[b];
    if (boundary_on_host(a)) g.staging[b] = offloaded++ % g.staging_buffers;
    if (a == ActivationPlacement::OffloadWithInternals)
      g.internals_on_host.push_back(static_cast<int64_t>(b));
    if (a == ActivationPlacement::Recompute) {
      g.recomputed[b] = true;
      g.recompute_buffer[b] = static_cast<int64_t>(b) - base - 1;
      g.recompute_buffers = std::max(g.recompute_buffers, g.recompute_buffer[b] + 1);
    } else {
      base = static_cast<int64_t>(b);
    }
    g.group_base[b] = base;
  }
  g.any_offloaded = offloaded > 0;
  g.internals_staging.assign(n, -1);
  g.internals_staging_buffers = std::min<int64_t>(2, static_cast<int64_t>(g.internals_on_host.size()));
  for (size_t k = 0; k < g.internals_on_host.size(); ++k)
    g.internals_staging[static_cast<size_t>(g.internals_on_host[k])] =
        static_cast<int64_t>(k) % g.internals_staging_buffers;
  return g;
}

std::vector<ActivationPlacement> keep_every_kth(int64_t layers, int64_t keep_every,
                                                ActivationPlacement kept) {
  FERRY_CHECK(keep_every >= 1, "plan", "keep_every must be at least 1 (every boundary kept), not {}",
              keep_every);
  std::vector<ActivationPlacement> a(static_cast<size_t>(layers), ActivationPlacement::Recompute);
  for (int64_t b = 0; b < layers; b += keep_every) a[static_cast<size_t>(b)] = kept;
  return a;
}

int64_t boundary_group_size(const std::vector<ActivationPlacement>& activations) {
  return boundary_groups(activations).recompute_buffers + 1;
}

}  // namespace ferry
