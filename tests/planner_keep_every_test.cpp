// The search's K of kept boundaries (one boundary in K kept, the others recomputed in the backward:
// planner/boundary_groups.h) on the 8B at long sequences with the lent H200's nominal rates and a
// 24 GiB GPU: where every boundary kept needs more host memory than the budget, a plan that
// recomputes some exists and names its K; its memory is what the memory model counts for that K,
// and its step time carries the recompute; a forced K holds; short sequences are not offered any.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/boundary_groups.h"
#include "planner/memory_model.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

class KeepEveryTest : public ::testing::Test {
 protected:
  const ModelConfig config_ = test::llama_8b();
  const ModelLayout layout_ = build_model_layout(config_);

  PlanRequest request(int64_t seq_len) const {
    PlanRequest r;
    r.seq_len = seq_len;
    r.global_batch = 1;
    r.device_budget = 24 * kGiB;
    r.host_budget = 120 * kGiB;
    r.host_beside_engine = 2 * kGiB;
    r.allow_optimizer_on_gpu = true;
    r.space.per_unit_gpu_optimizer = true;
    return r;
  }
  SearchResult search(const PlanRequest& r) const {
    return search_plans(config_, layout_, nominal_profile(config_, r.seq_len, DType::BF16), r, 2);
  }
};

// 128K tokens: every boundary is 1 GiB, and the 8B's state (~90-112 GiB) leaves the host no room for
// 32 of them. Every boundary kept is refused for the host; the search recomputes some.
TEST_F(KeepEveryTest, At128KTokensThePlanRecomputesBoundariesTheHostCannotHold) {
  PlanRequest all_kept = request(131072);
  all_kept.keep_every = 1;
  try {
    search(all_kept);
    ADD_FAILURE() << "every boundary kept fit a 120 GiB host at 128K tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }

  const SearchResult r = search(request(131072));
  const Plan& p = r.best.plan;
  const int64_t k = boundary_group_size(p.activations);
  EXPECT_GT(k, 1) << p.describe();
  for (size_t b = 0; b < p.activations.size(); ++b)
    EXPECT_EQ(p.activations[b] == ActivationPlacement::Recompute, b % static_cast<size_t>(k) != 0) << b;
  EXPECT_NE(p.describe().find("recomputed in the backward"), std::string::npos);
  // Within both budgets, as the memory model counts that K.
  const DeviceBytes d = device_bytes(config_, layout_, p, r.best.shape.chunk_tokens, r.best.shape.chunks);
  EXPECT_EQ(r.best.prediction.device.total(), d.total());
  EXPECT_LE(d.total(), static_cast<size_t>(0.95 * 24.0 * kGiB));
  EXPECT_LE(r.best.prediction.host.total(), 120 * kGiB);
  const size_t act = round_to_256(size_t{131072} * 4096 * 2);
  const size_t recompute_buffers = static_cast<size_t>(k - 1) * act;
  EXPECT_GE(d.activations, recompute_buffers + 2 * act);  // recompute buffers, head input, gradients

  // The same plan with every boundary kept (the recomputed ones offloaded) is slower per step by
  // less than the recompute's forwards would cost on a compute-bound step, but needs more host
  // memory than the budget: the recompute is the price of fitting, and the prediction counts it.
  Plan kept = p;
  for (ActivationPlacement& a : kept.activations)
    if (a == ActivationPlacement::Recompute) a = ActivationPlacement::OffloadToHost;
  const MachineProfile profile = nominal_profile(config_, 131072, DType::BF16);
  const Prediction without = predict(config_, layout_, kept, profile, r.best.shape);
  const double recomputes = static_cast<double>(32 - 32 / k);
  const double forward_s = profile.compute.layer_forward.at(131072);
  EXPECT_GT(r.best.prediction.step_seconds, without.step_seconds + 0.5 * recomputes * forward_s);
  EXPECT_GT(host_bytes(config_, layout_, kept, 131072, 1).total() + 2 * kGiB, 120 * kGiB);
}

TEST_F(KeepEveryTest, AForcedKHoldsAndShortSequencesKeepEveryBoundary) {
  PlanRequest r = request(65536);
  r.keep_every = 4;
  const SearchResult forced = search(r);
  EXPECT_EQ(boundary_group_size(forced.best.plan.activations), 4) << forced.best.plan.describe();
  for (const Candidate& c : forced.alternatives) EXPECT_EQ(boundary_group_size(c.plan.activations), 4);

  EXPECT_EQ(keep_every_candidates(8192, 32), (std::vector<int64_t>{1}));
  EXPECT_EQ(keep_every_candidates(2048, 32, /*host_bound=*/true), (std::vector<int64_t>{1, 2, 3, 4, 8}));
  EXPECT_EQ(keep_every_candidates(65536, 32), (std::vector<int64_t>{1, 2, 3, 4, 8}));
  EXPECT_EQ(keep_every_candidates(65536, 3), (std::vector<int64_t>{1, 2, 3}));
  PlanRequest zero = request(65536);
  zero.keep_every = 0;
  EXPECT_THROW(search(zero), Error);
}

// A K past the model's layers or a tile past a micro-chunk would plan as a smaller one would: refused,
// naming the bound.
TEST_F(KeepEveryTest, AKPastTheLayersAndATilePastTheChunkAreRefused) {
  PlanRequest r = request(65536);
  r.keep_every = 33;
  try {
    search(r);
    ADD_FAILURE() << "keep_every 33 planned for a model of 32 layers";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give 1 to 32"), std::string::npos) << e.what();
  }
  r.keep_every = 16;
  EXPECT_EQ(boundary_group_size(search(r).best.plan.activations), 16);

  PlanRequest tiled = request(65536);
  tiled.seq_tile = 65536;
  try {
    search(tiled);
    ADD_FAILURE() << "a tile of the whole 65,536-token sequence was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tile of a micro-chunk of 65536 tokens"), std::string::npos)
        << e.what();
  }
  tiled.seq_tile = 16384;
  EXPECT_EQ(search(tiled).best.plan.seq_tile, 16384);
}

// 65,536 tokens a step in rows of 2048: the step's boundaries weigh 512 MiB a layer, as one long
// row's. With a host that holds the state but not every boundary beside it, every boundary kept
// needs the disk tier (disk-bound, the state streamed each step) or does not fit; one boundary in K
// puts less state on disk and is faster. With room for every boundary, every boundary stays kept (no
// recompute).
TEST_F(KeepEveryTest, ShortRowsRecomputeBoundariesWhereTheHostIsTheBound) {
  PlanRequest r = request(2048);
  r.global_batch = 32;
  r.micro_batch = 4;
  r.host_budget = 105 * kGiB;
  r.disk_budget = 40 * kGiB;
  PlanRequest every_kept = r;
  every_kept.keep_every = 1;
  double disk_step = 0.0;
  int64_t every_kept_disk_units = 1 << 30;
  try {
    const SearchResult kept = search(every_kept);
    EXPECT_GT(kept.best.plan.disk_units(), 0) << kept.best.plan.describe();
    disk_step = kept.best.prediction.step_seconds;
    every_kept_disk_units = kept.best.plan.disk_units();
  } catch (const Error&) {
    disk_step = 1e30;  // refused: no plan keeps every boundary
  }
  const SearchResult chosen = search(r);
  const Plan& p = chosen.best.plan;
  EXPECT_GT(boundary_group_size(p.activations), 1) << p.describe();
  EXPECT_LT(p.disk_units(), every_kept_disk_units) << p.describe();
  EXPECT_LT(chosen.best.prediction.step_seconds, disk_step);
  EXPECT_LE(chosen.best.prediction.host.total(), 105 * kGiB);

  r.host_budget = 200 * kGiB;
  const SearchResult roomy = search(r);
  EXPECT_EQ(boundary_group_size(roomy.best.plan.activations), 1) << roomy.best.plan.describe();
}

}  // namespace
}  // namespace ferry
