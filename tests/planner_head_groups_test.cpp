// Attention in groups of KV heads in the planner (planner/head_groups.h): the group counts the
// search tries, the memory model's exact saving (q, k, v and their gradients, and the attention
// workspace, at 1/G), the cost of the backward's second pass over the q/k/v projections, and the
// search choosing groups where one group does not fit -- the 8B at 262,144 tokens on 24 GiB.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/cuda_ops_sizes.h"
#include "planner/cost_model.h"
#include "planner/head_groups.h"
#include "planner/memory_model.h"
#include "planner/model_flops.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr int64_t k256K = 262144;

Plan streamed_plan(const ModelLayout& layout, int64_t layers, int64_t seq_tile, int64_t head_groups) {
  Plan p;
  p.seq_tile = seq_tile;
  p.head_groups = head_groups;
  p.units.assign(layout.units.size(), UnitPlacement::Streamed);
  p.activations.assign(static_cast<size_t>(layers), ActivationPlacement::OffloadToHost);
  return p;
}

TEST(HeadGroupsPlanner, CandidatesDivideTheKvHeadsOfLongSequences) {
  const ModelConfig config = test::llama_8b();  // 8 KV heads
  EXPECT_EQ(head_group_candidates(config, 8192), std::vector<int64_t>{1});
  EXPECT_EQ(head_group_candidates(config, 65536), (std::vector<int64_t>{1, 2, 4, 8}));
  ModelConfig two = config;
  two.num_kv_heads = 2;
  EXPECT_EQ(head_group_candidates(two, 65536), (std::vector<int64_t>{1, 2}));
  ModelConfig six = config;
  six.num_kv_heads = 6;
  EXPECT_EQ(head_group_candidates(six, 65536), (std::vector<int64_t>{1, 2}));
}

// The backward runs the q/k/v projections of G - 1 of G groups again: at G = 4, 3/4 of their share
// of the 8B's weight FLOPs (4096 x 6144 of 4096 x 10240 + 3 x 4096 x 14336).
TEST(HeadGroupsPlanner, TheBackwardPaysTheProjectionsOfAllButOneGroupAgain) {
  const ModelConfig config = test::llama_8b();
  const double qkv = 4096.0 * (4096 + 2 * 1024),
               matrices = 4096.0 * (2 * 4096 + 2 * 1024) + 3.0 * 4096 * 14336;
  EXPECT_EQ(head_groups_backward_extra_share(config, 1), 0.0);
  EXPECT_DOUBLE_EQ(head_groups_backward_extra_share(config, 4), 0.75 * qkv / matrices);
  EXPECT_DOUBLE_EQ(head_groups_backward_extra_share(config, 8), 0.875 * qkv / matrices);
  EXPECT_NEAR(head_groups_backward_extra_share(config, 4), 0.0865, 0.0005);

  const ModelLayout layout = build_model_layout(config);
  const MachineProfile profile = nominal_profile(config, k256K, DType::BF16);
  const StepShape shape{k256K, 1};
  const double one = predict(config, layout, streamed_plan(layout, 32, 8192, 1), profile, shape).step_seconds;
  const double four =
      predict(config, layout, streamed_plan(layout, 32, 8192, 4), profile, shape).step_seconds;
  // 32 layers' backward plus 8.65% of a layer forward each.
  const double extra =
      32.0 * head_groups_backward_extra_share(config, 4) * profile.compute.layer_forward.at(k256K);
  EXPECT_NEAR(four - one, extra, 0.02 * extra);
}

// q, k, v and dq, dk, dv shrink to 1/G (bf16, T x (q_dim + 2 kv_dim) each set), attn and d_attn
// stay whole, and the CUDA attention workspace is sized for 1/G of the query heads.
TEST(HeadGroupsPlanner, MemoryModelCountsOneGroupsTensorsExactly) {
  const ModelConfig config = test::llama_8b();
  const ModelLayout layout = build_model_layout(config);
  const DeviceBytes one = device_bytes(config, layout, streamed_plan(layout, 32, 8192, 1), k256K, 1);
  for (int64_t groups : {2, 4, 8}) {
    SCOPED_TRACE(groups);
    const DeviceBytes g = device_bytes(config, layout, streamed_plan(layout, 32, 8192, groups), k256K, 1);
    const size_t per_set = static_cast<size_t>(k256K) * (4096 + 2 * 1024) * 2;  // q, k, v in bf16
    const size_t saved = 2 * per_set - 2 * per_set / static_cast<size_t>(groups);
    EXPECT_EQ(one.scratch - g.scratch, saved);
    EXPECT_EQ(one.ops_workspace - g.ops_workspace,
              attention_workspace_bytes(k256K, 32, 128) -
                  attention_workspace_bytes(k256K, static_cast<int>(32 / groups), 128));
    EXPECT_EQ(one.activations, g.activations);
    EXPECT_EQ(one.slots, g.slots);
  }
  // At 256K: 9 GiB of scratch and 8.75 GiB of workspace with one group, 4.5 less and 6.5 less at 4.
  const DeviceBytes four = device_bytes(config, layout, streamed_plan(layout, 32, 8192, 4), k256K, 1);
  EXPECT_GT(one.scratch + one.ops_workspace, four.scratch + four.ops_workspace + 10 * kGiB);
}

PlanRequest request_256k(size_t disk_gib) {
  PlanRequest r;
  r.seq_len = k256K;
  r.global_batch = 1;
  r.device_budget = 24 * kGiB;
  r.host_budget = 120 * kGiB;
  r.host_beside_engine = 2 * kGiB;
  r.disk_budget = disk_gib * kGiB;
  return r;
}

// 262,144 tokens of the 8B at gpu_memory 24 GiB, host 120 GiB and 40 GiB of disk: with all heads at
// once no plan fits the GPU; the search runs attention in groups and fits, computing at >= 40%
// of the H200's peak by the nominal profile. A forced count is kept; one that does not divide the
// KV heads is refused.
TEST(HeadGroupsPlanner, EightBAt256KFitsTwentyFourGiBInGroups) {
  const ModelConfig config = test::llama_8b();
  const ModelLayout layout = build_model_layout(config);
  const MachineProfile profile = nominal_profile(config, k256K, DType::BF16);
  PlanRequest one = request_256k(40);
  one.head_groups = 1;
  EXPECT_THROW(search_plans(config, layout, profile, one), Error);

  const SearchResult r = search_plans(config, layout, profile, request_256k(40));
  EXPECT_GT(r.best.plan.head_groups, 1);
  EXPECT_LE(r.best.prediction.device.total(), 24 * kGiB);
  EXPECT_LE(r.best.prediction.host.total(), 120 * kGiB);
  const double flops_per_token =
      training_flops_per_token(config, static_cast<double>(layout.parameter_count()), k256K);
  const double mfu = flops_per_token * k256K / r.best.prediction.step_seconds / kH200DenseBf16FlopsPerS;
  EXPECT_GE(mfu, 0.40) << r.best.plan.describe();
  for (auto a : r.best.plan.activations) EXPECT_NE(a, ActivationPlacement::KeepWithInternals);

  PlanRequest forced = request_256k(40);
  forced.head_groups = 4;
  EXPECT_EQ(search_plans(config, layout, profile, forced).best.plan.head_groups, 4);
  forced.head_groups = 3;
  EXPECT_THROW(search_plans(config, layout, profile, forced), Error);
}

}  // namespace
}  // namespace ferry
