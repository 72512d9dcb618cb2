// Advice for a plan that leaves the GPU waiting for the CPU AdamW, on synthetic machines whose
// numbers say what to expect: the 8B shape, 64k tokens a step, 60 ms per layer forward for the
// step's tokens (1.9 s of forward, 3.8 s of backward), 24 GiB of device memory.
#include <gtest/gtest.h>

#include "planner/idle_advice.h"
#include "planner_8b_search_fixture.h"

namespace ferry {
namespace {

class IdleAdviceTest : public test::Llama8BSearchTest {
 protected:
  PlanRequest request(bool clipping) const {
    PlanRequest r = Llama8BSearchTest::request(24);
    r.clipping = clipping;
    return r;
  }
  std::vector<IdleAdvice> advise(const MachineProfile& m, const PlanRequest& r, Prediction* best) const {
    *best = search_plans(config_, layout_, m, r, 0).best.prediction;
    return idle_advice(config_, layout_, m, r, *best);
  }
};

// CPU AdamW at 2.5 G params/s: with clipping its ~3 s pass over the streamed layers cannot hide
// under a 1.9 s forward. Twice the tokens double the forward (3.8 s) and not the pass; without
// clipping the pass runs beside the 3.8 s backward.
TEST_F(IdleAdviceTest, ASlowCpuPassWithClippingIsAdvisedMoreTokensOrNoClipping) {
  const MachineProfile m = machine(55e9, 2.5e9);
  Prediction best;
  const std::vector<IdleAdvice> advice = advise(m, request(true), &best);
  ASSERT_GT(best.gpu_idle_fraction, 0.10) << best.explain();
  ASSERT_EQ(advice.size(), 2u);
  EXPECT_EQ(advice[0].setting, "global_batch: 16");
  EXPECT_EQ(advice[0].effect, "131072 tokens a step");
  EXPECT_LE(advice[0].prediction.gpu_idle_fraction, kIdleAdviceThreshold);
  EXPECT_GT(advice[0].prediction.tokens_per_second, best.tokens_per_second);
  EXPECT_EQ(advice[1].setting, "max_grad_norm: 0");
  EXPECT_LT(advice[1].prediction.gpu_idle_fraction, best.gpu_idle_fraction);
}

// A fast CPU (20 G params/s: 0.4 s) hides under the forward: nothing to advise.
TEST_F(IdleAdviceTest, APassThatHidesGetsNoAdvice) {
  Prediction best;
  EXPECT_TRUE(advise(machine(55e9, 20e9), request(true), &best).empty()) << best.explain();
  EXPECT_LE(best.gpu_idle_fraction, kIdleAdviceThreshold);
}

// A GPU that waits for the link (4 GB/s: a layer's 436 MB of weights in 0.11 s against a 60 ms
// forward), with a fast CPU: more tokens or no clipping are not what it waits for.
TEST_F(IdleAdviceTest, AGpuWaitingForTheLinkGetsNoAdvice) {
  Prediction best;
  const std::vector<IdleAdvice> advice = advise(machine(4e9, 20e9), request(true), &best);
  ASSERT_GT(best.gpu_idle_fraction, kIdleAdviceThreshold) << best.explain();
  EXPECT_TRUE(advice.empty()) << advice.front().setting;
}

}  // namespace
}  // namespace ferry
