// Lean optimizer_state formats on the CUDA device (bf16 weights: the lean AdamW writes the bf16
// upload copy itself, a path the simulated device's fp32 weights do not take): 8 steps of each
// format track the exact fp32 run's losses (the formats round the state, not the math: within 2%
// over 8 steps of a tiny model), and a resumed run continues the unbroken one's losses.
#include <cmath>

#include "device/device.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/model_init.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

class LeanGpuTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU";
    data_ = scratch_ / "train.jsonl";
    test::write_token_data(data_, 200, 320, 13);
  }
  TrainConfig config(const std::string& out, const std::string& format, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {"model=preset:qwen3/tiny",
                                          "data=" + data_.string(),
                                          "output_dir=" + (scratch_ / out).string(),
                                          "device=cuda",
                                          "seq_len=64",
                                          "global_batch=8",
                                          "max_steps=8",
                                          "learning_rate=2e-3",
                                          "warmup_steps=2",
                                          "weight_decay=0.1",
                                          "max_grad_norm=1.0",
                                          "optimizer_state=" + format};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }
  std::vector<double> losses(const TrainConfig& c, TrainHooks hooks = {}) {
    std::vector<double> out;
    hooks.on_step = [&](const StepRecord& r) { out.push_back(r.loss); };
    run_training(c, hooks);
    return out;
  }
  test::ScratchDir scratch_{"lean-gpu"};
  std::filesystem::path data_;
};

TEST_P(LeanGpuTest, TracksTheExactRunAndResumes) {
  const std::vector<double> exact = losses(config("exact", "fp32"));
  const std::vector<double> lean = losses(config("lean", GetParam()));
  ASSERT_EQ(lean.size(), 8u);
  for (size_t i = 0; i < lean.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lean[i]));
    EXPECT_NEAR(lean[i] / exact[i], 1.0, 0.02) << "step " << i + 1;
  }
  // (Random tokens hold nothing to learn in 8 steps: the losses are compared with the exact run's,
  // not with their own start.)
  TrainHooks stop;
  stop.stop_after_steps = 4;
  losses(config("split", GetParam()), stop);
  const std::vector<double> rest = losses(config("split", GetParam(), {"resume=true"}));
  ASSERT_EQ(rest.size(), 4u);
  // The state resumes bit for bit; the GPU's kernels are deterministic for one plan, so the losses
  // are the unbroken run's (a tolerance only for a reduction order the plan search could change).
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_NEAR(rest[i], lean[4 + i], 1e-6 * lean[4 + i]) << "step " << 5 + i;
}

INSTANTIATE_TEST_SUITE_P(Formats, LeanGpuTest, ::testing::Values("fp32_q8", "bf16c8_q8", "bf16sr_q8"));

}  // namespace
}  // namespace ferry
