// The memory model's arithmetic on the Llama-3.1-8B shape: the CUDA ops' working memory of the
// worked example in memory_model.h, slots sized to the largest streamed unit, and the bf16
// weight-gradient sum only where layers have bf16 gradients.
#include <gtest/gtest.h>

#include "planner/memory_model.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(MemoryModel, CudaOpsWorkspaceOfTheWorkedExample) {
  const ModelConfig c = test::llama_8b();
  const size_t bf16 = cuda_ops_workspace_bytes(c, 8192, DType::BF16);
  // memory_model.h's worked example: 701 MiB, of which 290 MiB attention (cuDNN's backward).
  EXPECT_GE(bf16, 700 * kMiB);
  EXPECT_LE(bf16, 702 * kMiB);
  // fp32 gradients need no bf16 sum of the largest weight gradient (14336 x 4096 x 2 bytes).
  EXPECT_EQ(bf16 - cuda_ops_workspace_bytes(c, 8192, DType::F32), size_t{14336} * 4096 * 2);
}

class MemoryModelPlans : public ::testing::Test {
 protected:
  const ModelConfig config_ = test::llama_8b();
  const ModelLayout layout_ = build_model_layout(config_);
  Plan plan(UnitPlacement all) const {
    Plan p;
    p.gpu_slots = 2;
    p.units.assign(layout_.units.size(), all);
    p.activations.assign(static_cast<size_t>(config_.num_layers), ActivationPlacement::OffloadToHost);
    return p;
  }
};

// Streaming the 525 M-parameter head (lm_head and final norm) sizes both slots to it; keeping the
// embedding and the head resident shrinks them to a 218 M-parameter layer's.
TEST_F(MemoryModelPlans, SlotsAreSizedToTheLargestStreamedUnit) {
  Plan p = plan(UnitPlacement::Streamed);
  const size_t head = static_cast<size_t>(layout_.units[layout_.head_unit()].numel);
  const size_t layer = static_cast<size_t>(layout_.units[layout_.layer_unit(0)].numel);
  EXPECT_EQ(device_bytes(config_, layout_, p, 8192, 8).slots, 2 * 2 * round_to_256(head * 2));
  p.units[layout_.embedding_unit()] = p.units[layout_.head_unit()] = UnitPlacement::ResidentParams;
  EXPECT_EQ(device_bytes(config_, layout_, p, 8192, 8).slots, 2 * 2 * round_to_256(layer * 2));
}

TEST_F(MemoryModelPlans, TheWeightGradientProductServesBf16LayerGradientsOnly) {
  const DeviceBytes streamed = device_bytes(config_, layout_, plan(UnitPlacement::Streamed), 8192, 8);
  const DeviceBytes on_gpu = device_bytes(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer), 8192, 8);
  EXPECT_EQ(streamed.ops_workspace, cuda_ops_workspace_bytes(config_, 8192, DType::BF16));
  EXPECT_EQ(on_gpu.ops_workspace, cuda_ops_workspace_bytes(config_, 8192, DType::F32));
}

}  // namespace
}  // namespace ferry
