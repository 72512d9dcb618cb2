// `gpus: N` end to end on simulated devices (engine/device_group_engine.h): a run of two devices
// trains, saves, and resumes from its checkpoint as if uninterrupted, on two devices or on one;
// uneven splits and configurations several devices cannot run are refused with what to change.
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace ferry {
namespace {

using test::contains;
using test::error_of;
using test::weights_moved;

class GpusRunTest : public test::TinyRun {
 protected:
  TrainConfig sim(const std::string& out, std::vector<std::string> extra = {}) const {
    extra.insert(extra.begin(), {"device=sim", "gpu_memory=256MiB", "max_grad_norm=0.5", "threads=2"});
    return config(out, extra);
  }
  static std::vector<double> losses(const TrainSummary& s) {
    std::vector<double> out;
    for (const auto& r : s.steps) out.push_back(r.loss);
    return out;
  }
};

TEST_F(GpusRunTest, TwoDevicesTrainSaveAndResumeAsIfUninterrupted) {
  const TrainSummary full = run_training(sim("full", {"gpus=2"}));
  ASSERT_TRUE(full.finished);
  ASSERT_EQ(full.steps.size(), 6u);
  EXPECT_TRUE(weights_moved(scratch_ / "full", model_dir_));

  TrainHooks stop;
  stop.stop_after_steps = 3;
  const TrainSummary first = run_training(sim("split", {"gpus=2"}), stop);
  ASSERT_EQ(first.final_step, 3);
  ASSERT_TRUE(find_latest_checkpoint(scratch_ / "split").has_value());
  const TrainSummary rest = run_training(sim("split", {"gpus=2", "resume=true"}));
  ASSERT_TRUE(rest.finished);
  ASSERT_EQ(rest.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first.steps[i].loss, full.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(rest.steps[i].loss, full.steps[3 + i].loss) << "step " << i + 4;
    EXPECT_EQ(rest.steps[i].grad_norm, full.steps[3 + i].grad_norm) << "step " << i + 4;
  }
  EXPECT_EQ(test::read_file(scratch_ / "full" / "model.safetensors"),
            test::read_file(scratch_ / "split" / "model.safetensors"));
}

TEST_F(GpusRunTest, ACheckpointOfTwoDevicesResumesOnOne) {
  // The checkpoint is the one host state, whatever the devices: one device continues it, its steps
  // within the fp32 summation bound of two devices' (train_device_group_test.cpp).
  const TrainSummary two = run_training(sim("two", {"gpus=2"}));
  TrainHooks stop;
  stop.stop_after_steps = 3;
  run_training(sim("moved", {"gpus=2"}), stop);
  const TrainSummary one = run_training(sim("moved", {"gpus=1", "resume=true"}));
  ASSERT_TRUE(one.finished);
  ASSERT_EQ(one.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(one.steps[i].loss, two.steps[3 + i].loss, 1e-5) << "step " << i + 4;
}

TEST_F(GpusRunTest, TwoDevicesLossesAreOneDevicesWithinTheSummationBound) {
  const TrainSummary one = run_training(sim("one"));
  const TrainSummary two = run_training(sim("two", {"gpus=2"}));
  ASSERT_EQ(one.steps.size(), two.steps.size());
  EXPECT_NEAR(one.steps[0].loss, two.steps[0].loss, 1e-6 * one.steps[0].loss);
  for (size_t i = 0; i < one.steps.size(); ++i)
    EXPECT_NEAR(one.steps[i].loss, two.steps[i].loss, 1e-5 * one.steps[i].loss) << "step " << i + 1;
}

TEST_F(GpusRunTest, UnevenSharesAndOneDeviceOptionsAreRefused) {
  EXPECT_TRUE(contains(error_of([&] { sim("x", {"gpus=3"}); }), "multiple of micro_batch x gpus"))
      << error_of([&] { sim("x", {"gpus=3"}); });
  EXPECT_TRUE(contains(error_of([&] { config("x", {"gpus=2"}); }), "device: cpu"));
  EXPECT_TRUE(contains(error_of([&] {
                         run_training(sim("x", {"gpus=2", "weight_upload=convert-on-upload"}));
                       }),
                       "convert-on-upload"));
  EXPECT_TRUE(contains(error_of([&] { run_training(sim("x", {"gpus=auto"})); }), "gpus: auto"));
  EXPECT_TRUE(contains(error_of([&] { run_training(sim("x", {"gpus=2", "trace=t.json"})); }), "trace"));
}

TEST_F(GpusRunTest, AJobOfSeveralProcessesIsRefusedSayingWhatRunsInstead) {
  // As torchrun would start rank 1 of 2: each process would otherwise train alone.
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  const std::string error = error_of([&] { run_training(sim("job", {"gpus=2"})); });
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_ADDR");
  EXPECT_TRUE(contains(error, "rank 1 of 2 processes")) << error;
  EXPECT_TRUE(contains(error, "gpus: N")) << error;
  EXPECT_FALSE(std::filesystem::exists(scratch_ / "job")) << "nothing is written";
}

}  // namespace
}  // namespace ferry
