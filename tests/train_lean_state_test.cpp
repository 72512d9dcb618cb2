// Training with a lean optimizer_state end to end (optim/state_format.h): for each format the
// sliding engine on the simulated device gives the plain trainer's losses and output bit for bit,
// a resumed run continues as an unbroken one, and a checkpoint of another format is refused.
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "device/device.h"
#include "engine/sliding_engine.h"
#include "ops/device_ops.h"
#include "planner/memory_model.h"
#include "sliding_plans.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/checkpoint.h"
#include "train/model_init.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

class LeanTrainTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_dir_ = scratch_ / "model";
    write_random_model(preset_config("qwen3", "tiny"), 7, model_dir_);
    data_ = scratch_ / "train.jsonl";
    test::write_token_data(data_, 120, 320, 11);
  }
  TrainConfig config(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = test::tiny_run_overrides(model_dir_, data_, scratch_ / out);
    overrides.insert(overrides.end(), {"weight_decay=0.1", "max_grad_norm=0.5", "threads=2",
                                       std::string("optimizer_state=") + GetParam()});
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }
  std::vector<double> losses(const TrainConfig& c, TrainHooks hooks = {}) {
    std::vector<double> out;
    hooks.on_step = [&](const StepRecord& r) { out.push_back(r.loss); };
    run_training(c, hooks);
    return out;
  }

  test::ScratchDir scratch_{"lean"};
  std::filesystem::path model_dir_, data_;
};

TEST_P(LeanTrainTest, SimulatedDeviceMatchesTheCpuBackendBitForBit) {
  const std::vector<double> cpu = losses(config("cpu", {"device=cpu"}));
  const std::vector<double> sim = losses(config("sim", {"device=sim", "gpu_memory=3MiB", "gpu_slots=2"}));
  ASSERT_EQ(cpu.size(), 6u);
  EXPECT_EQ(cpu, sim);
  EXPECT_EQ(test::read_file(scratch_ / "cpu" / "model.safetensors"),
            test::read_file(scratch_ / "sim" / "model.safetensors"));
  EXPECT_TRUE(test::weights_moved(scratch_ / "cpu", model_dir_));
  // The format is in effect: from step 3 on (the first update has lr 0) the losses leave fp32's.
  const std::vector<double> exact = losses(config("exact", {"device=cpu", "optimizer_state=fp32"}));
  EXPECT_NE(exact.back(), cpu.back());
}

TEST_P(LeanTrainTest, UpdatesDuringBackwardMatchTheCpuBackend) {
  const std::vector<double> cpu = losses(config("cpu", {"device=cpu", "max_grad_norm=0"}));
  const std::vector<double> sim =
      losses(config("sim", {"device=sim", "max_grad_norm=0", "update_schedule=during-backward",
                            "offload_activations=all"}));
  EXPECT_EQ(cpu, sim);
}

TEST_P(LeanTrainTest, ResumeIsBitExactOnBothBackends) {
  for (const char* device : {"device=cpu", "device=sim"}) {
    SCOPED_TRACE(device);
    const std::string tag = device + 7;
    const std::vector<double> full = losses(config("full-" + tag, {device}));
    TrainHooks stop;
    stop.stop_after_steps = 3;
    losses(config("split-" + tag, {device}), stop);
    const std::vector<double> rest = losses(config("split-" + tag, {device, "resume=true"}));
    ASSERT_EQ(rest.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]) << "step " << 4 + i;
    EXPECT_EQ(test::read_file(scratch_ / ("full-" + tag) / "model.safetensors"),
              test::read_file(scratch_ / ("split-" + tag) / "model.safetensors"));
  }
}

TEST_P(LeanTrainTest, ACheckpointOfAnotherFormatIsRefused) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  losses(config("other"), stop);
  const std::string other = std::string(GetParam()) == "bf16sr_q8" ? "fp32_q8" : "bf16sr_q8";
  EXPECT_TRUE(test::throws_with(
      [&] {
        run_training(config("other", {"resume=true", "optimizer_state=" + other}));
      },
      {"holds optimizer state in the format", GetParam(), "optimizer_state: " + other}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        run_training(config("other", {"resume=true", "optimizer_state=fp32"}));
      },
      {"holds optimizer state in the format", GetParam()}));
}

// The engine allocates the host bytes the memory model counts for the format, pinned and pageable.
TEST_P(LeanTrainTest, AllocatesWhatTheMemoryModelSays) {
  OptimizerStateFormat format;
  ASSERT_TRUE(parse_state_format(GetParam(), &format));
  nlohmann::json json = preset_config("qwen3", "tiny").raw;
  json["num_hidden_layers"] = 4;
  const ModelConfig config = parse_model_config(json, "test");
  const ModelLayout layout = build_model_layout(config);
  Plan plan = test::make_plan(layout, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward);
  plan.optimizer_state = format;
  auto device = make_sim_device({});
  auto ops = make_device_ops(*device);
  SlidingEngine engine(config, layout, *device, *ops, plan, test::kMicro * test::kSeq,
                       test::kGlobal / test::kMicro, false);
  const HostBytes h =
      host_bytes(config, layout, plan, test::kMicro * test::kSeq, test::kGlobal / test::kMicro);
  EXPECT_EQ(device->pinned_memory().in_use, h.pinned);
  size_t pageable = 0;
  for (size_t u = 0; u < layout.units.size(); ++u)
    for (const HostArray* a : engine.host().unit(u).state(format))
      pageable += HostArray::mapped_bytes(a->size());
  // The engine's arrays, and the buffer a save decodes one tensor of masters into.
  EXPECT_GT(lean_save_scratch_bytes(layout, plan), 0u);
  pageable += lean_save_scratch_bytes(layout, plan);
  EXPECT_EQ(pageable, h.pageable);
  EXPECT_LT(pageable, host_bytes(config, layout,
                                 test::make_plan(layout, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward),
                                 test::kMicro * test::kSeq, test::kGlobal / test::kMicro)
                          .pageable);
}

INSTANTIATE_TEST_SUITE_P(Formats, LeanTrainTest, ::testing::Values("fp32_q8", "bf16c8_q8", "bf16sr_q8"));

}  // namespace
}  // namespace ferry
