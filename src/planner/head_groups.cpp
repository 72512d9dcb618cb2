#include "planner/head_groups.h"

#include "planner/sequence_tile.h"

namespace ferry {

std::vector<int64_t> head_group_counts(const ModelConfig& c) {
  std::vector<int64_t> out = {1};
  for (int64_t g : {2, 4, 8})
    if (g <= c.num_kv_heads && c.num_kv_heads % g == 0) out.push_back(g);
  return out;
}

std::vector<int64_t> head_group_candidates(const ModelConfig& c, int64_t seq_len) {
  return seq_len <= kTiledFromSeqLen ? std::vector<int64_t>{1} : head_group_counts(c);
}

double head_groups_backward_extra_share(const ModelConfig& c, int64_t head_groups) {
  if (head_groups <= 1) return 0.0;
  const double H = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double Q = static_cast<double>(c.q_dim()), K = static_cast<double>(c.kv_dim());
  const double again = static_cast<double>(head_groups - 1) / static_cast<double>(head_groups);
  return again * H * (Q + 2.0 * K) / (H * (2.0 * Q + 2.0 * K) + 3.0 * H * F);
}

}  // namespace ferry
