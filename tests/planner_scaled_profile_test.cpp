// A measured profile carried to another shape by FLOPs (planner/scaled_profile.h): compute times
// scale as the nominal FLOP counts do, everything the shape does not change stays as measured, and
// a profile is never scaled from a shape it was not measured for.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/nominal_profile.h"
#include "planner/scaled_profile.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr int64_t kSeq = 2048;

MachineProfile measured_8b() {
  const ModelConfig shape = test::llama_8b();
  MachineProfile p = test::round_profile(shape, kSeq, 16384, 0.1, 50e9, 5e9, 100e9);
  p.compute.layer_forward.fixed_s = 1e-4;
  p.compute.layer_backward_kept = {2e-4, 1.5 * p.compute.layer_forward.per_token_s};
  p.device_name = "NVIDIA H200";
  return p;
}

TEST(ScaledProfile, ItsOwnShapeIsTheMeasurement) {
  const MachineProfile m = measured_8b();
  const MachineProfile same = scale_profile(m, test::llama_8b(), test::llama_8b(), "llama/llama-3.1-8b");
  EXPECT_EQ(same.shape_key, m.shape_key);
  EXPECT_DOUBLE_EQ(same.compute.layer_forward.per_token_s, m.compute.layer_forward.per_token_s);
  EXPECT_DOUBLE_EQ(same.compute.head.per_token_s, m.compute.head.per_token_s);
  EXPECT_DOUBLE_EQ(same.compute.layer_backward_kept.per_token_s, m.compute.layer_backward_kept.per_token_s);
}

// Llama-3.3-70B's layer: 2 x 856 M projection FLOPs + 2 x 2048 x 8192 in attention per token
// (1745 M), against the 8B's 2 x 218 M + 2 x 2048 x 4096 (453 M): 3.85 times the per-token time;
// launches as measured.
TEST(ScaledProfile, ComputeScalesByFlopsAndTheMachineStays) {
  const ModelConfig big = test::llama_shape(128256, 8192, 28672, 80, 64, 8, false);
  const MachineProfile m = measured_8b();
  const MachineProfile s = scale_profile(m, test::llama_8b(), big, "llama/llama-3.1-8b");
  const MachineProfile n8 = nominal_profile(test::llama_8b(), kSeq, DType::BF16);
  const MachineProfile n70 = nominal_profile(big, kSeq, DType::BF16);
  const double layer = n70.compute.layer_forward.per_token_s / n8.compute.layer_forward.per_token_s;
  EXPECT_NEAR(layer, 3.85, 0.01);
  EXPECT_DOUBLE_EQ(s.compute.layer_forward.per_token_s, m.compute.layer_forward.per_token_s * layer);
  EXPECT_DOUBLE_EQ(s.compute.layer_forward.fixed_s, m.compute.layer_forward.fixed_s);
  EXPECT_NEAR(s.compute.layer_backward_kept.per_token_s / m.compute.layer_backward_kept.per_token_s, layer,
              1e-9);
  EXPECT_NEAR(s.compute.head.per_token_s / m.compute.head.per_token_s, 2.0, 0.01);  // hidden x vocab doubles
  EXPECT_EQ(s.shape_key, model_shape_key(big, kSeq, DType::BF16));
  EXPECT_NE(s.device_name.find("scaled by FLOPs from its llama/llama-3.1-8b profile"), std::string::npos);
  EXPECT_DOUBLE_EQ(s.transfer.h2d_bytes_per_s, m.transfer.h2d_bytes_per_s);
  EXPECT_DOUBLE_EQ(s.host.cpu_adamw_params_per_s, m.host.cpu_adamw_params_per_s);
  EXPECT_DOUBLE_EQ(s.compute.gpu_adamw_params_per_s, m.compute.gpu_adamw_params_per_s);
}

TEST(ScaledProfile, RefusesAShapeTheProfileWasNotMeasuredFor) {
  EXPECT_THROW(scale_profile(measured_8b(), test::llama_1b(), test::llama_8b(), "llama/llama-3.2-1b"), Error);
}

}  // namespace
}  // namespace ferry
