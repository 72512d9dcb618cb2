// The evaluation's predicted time (planner/eval_cost.h): forward only through the run's plan, so
// less than a step of the same tokens, proportional to the batches it runs, and on plans whose
// numbers are computable by hand exactly the forward's compute plus what it waits for.
#include <gtest/gtest.h>

#include "planner/cost_model.h"
#include "planner/eval_cost.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

class EvalCostTest : public ::testing::Test {
 protected:
  static constexpr int64_t kSeq = 1024, kChunks = 8;
  const ModelConfig config_ = test::toy_shape();
  const ModelLayout layout_ = build_model_layout(config_);
  const StepShape shape_{kSeq, kChunks};
  const int64_t L_ = config_.num_layers;

  Plan plan(UnitPlacement units, int64_t slots = 2) const {
    Plan p;
    p.gpu_slots = slots;
    p.units.assign(layout_.units.size(), units);
    p.activations.assign(static_cast<size_t>(L_), ActivationPlacement::KeepOnGpu);
    return p;
  }
};

// Everything on the GPU: no uploads but the tokens (the six int32 arrays the engine copies); the batch is the
// embedding, 4 layer forwards (0.1 s each) and a third of the head's 0.2 s (its forward GEMM without the two
// gradient GEMMs).
TEST_F(EvalCostTest, EverythingOnTheGpuIsTheForwardCompute) {
  const double pcie = 1e12;
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, pcie, 1e9, 1e9);
  const EvalPrediction e =
      predict_evaluation(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer), profile, shape_);
  const double tokens = 6.0 * static_cast<double>(shape_.tokens()) * sizeof(int32_t) / pcie;
  EXPECT_NEAR(e.batch_seconds, tokens + 0.1 / 100 + 4 * 0.1 + 0.2 / 3 + sizeof(float) / pcie, 1e-9);
  EXPECT_EQ(e.batch_tokens, shape_.tokens());
}

// A step of the same tokens runs the same forward plus the backward and the optimizer: the
// evaluation is faster, with every unit streamed (the uploads bound both) as with the GPU's compute
// bounding them.
TEST_F(EvalCostTest, ForwardOnlyIsFasterThanAStepOfTheSameTokens) {
  for (const double pcie : {1e9, 1e12}) {
    const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, pcie, 1e9);
    const Plan streamed = plan(UnitPlacement::Streamed, 3);
    const EvalPrediction e = predict_evaluation(config_, layout_, streamed, profile, shape_);
    const Prediction step = predict(config_, layout_, streamed, profile, shape_);
    EXPECT_GT(e.batch_seconds, 0.0) << pcie;
    EXPECT_LT(e.batch_seconds, step.step_seconds) << pcie;
    // At least the forward's compute, and the weights' one crossing when uploads bound it.
    EXPECT_GE(e.batch_seconds, 4 * 0.1);
    double bytes = 0;
    for (const auto& u : layout_.units) bytes += 2.0 * static_cast<double>(u.numel);
    EXPECT_GE(e.batch_seconds, bytes / pcie);
  }
}

// The evaluation set is run in batches of the step's shape: twice the tokens, twice the time; a
// partial batch costs a whole one (its weights still cross once).
TEST_F(EvalCostTest, ScalesWithTheEvaluationTokens) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e9, 1e9);
  const EvalPrediction e =
      predict_evaluation(config_, layout_, plan(UnitPlacement::Streamed), profile, shape_);
  const int64_t batch = shape_.tokens();
  EXPECT_DOUBLE_EQ(e.seconds_for(batch), e.batch_seconds);
  EXPECT_DOUBLE_EQ(e.seconds_for(10 * batch), 10 * e.batch_seconds);
  EXPECT_DOUBLE_EQ(e.seconds_for(20 * batch), 2 * e.seconds_for(10 * batch));
  EXPECT_DOUBLE_EQ(e.seconds_for(batch + 1), 2 * e.batch_seconds);
  EXPECT_DOUBLE_EQ(e.seconds_for(0), 0.0);
}

// A larger micro-chunk count per batch runs more forward work per batch, never less.
TEST_F(EvalCostTest, MoreChunksPerBatchTakeLonger) {
  const MachineProfile profile = test::round_profile(config_, kSeq, shape_.tokens(), 0.1, 1e10, 1e9);
  const Plan streamed = plan(UnitPlacement::Streamed);
  const EvalPrediction small = predict_evaluation(config_, layout_, streamed, profile, StepShape{kSeq, 2});
  const EvalPrediction large = predict_evaluation(config_, layout_, streamed, profile, StepShape{kSeq, 16});
  EXPECT_LT(small.batch_seconds, large.batch_seconds);
  EXPECT_LT(large.seconds_for(16 * kSeq * 4), small.seconds_for(16 * kSeq * 4));  // fewer weight crossings
}

}  // namespace
}  // namespace ferry
