// Bad inputs through the ferry executable, as users meet them: `ferry train` exits with status 2
// and one line naming the file and what is wrong, never a signal, never status 0 with a model
// written from bad weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fault_inputs.h"
#include "model/model_weights.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ferry::faults {
namespace {

namespace fs = std::filesystem;

class TrainCommandFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tiny_model(model_);
    write_bytes(data_, "{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8], \"labels\": [1, 2, 3, 4, 5, 6, 7, 8]}\n");
  }

  // Runs `ferry train` on a config of `yaml` plus the paths of this fixture; returns the exit
  // status (-1 for a signal) and the output.
  int train(const std::string& yaml, std::string* output) const {
    const fs::path config = scratch_ / "train.yaml";
    write_bytes(config, yaml + "model: " + model_.string() + "\ndata: " + data_.string() +
                            "\noutput_dir: " + (scratch_ / "out").string() +
                            "\ndevice: cpu\nseq_len: 8\nglobal_batch: 1\nmax_steps: 1\n");
    return test::run_command(test::ferry_binary().string() + " train " + config.string(), output);
  }

  test::ScratchDir scratch_{"faults-cli"};
  fs::path model_ = scratch_ / "model";
  fs::path data_ = scratch_ / "train.jsonl";
};

TEST_F(TrainCommandFaults, ADeeplyNestedConfigJsonIsAnErrorNotACrash) {
  write_bytes(model_ / "config.json", nested_arrays(100000));
  std::string output;
  EXPECT_EQ(train("", &output), 2) << output;
  EXPECT_NE(output.find("ferry: error: [config] " + (model_ / "config.json").string() +
                        ": arrays and objects nested deeper than 512 levels"),
            std::string::npos)
      << output;
}

TEST_F(TrainCommandFaults, ANanWeightIsRefusedBeforeTraining) {
  ModelWeights w = load_model_weights(model_);
  w.param(w.layout.embedding_unit(), "embed_tokens.weight")[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<const float*> units;
  for (const auto& u : w.units) units.push_back(u.data());
  save_model_weights(model_, w.layout, units, DType::F32, size_t{1} << 40);
  std::string output;
  EXPECT_EQ(train("", &output), 2) << output;
  EXPECT_NE(output.find("tensor 'model.embed_tokens.weight' holds nan at element [0, 3]"), std::string::npos)
      << output;
  EXPECT_FALSE(fs::exists(scratch_ / "out" / "model.safetensors"));
}

TEST_F(TrainCommandFaults, AnAliasConflictNamesBothKeys) {
  std::string output;
  EXPECT_EQ(train("learning_rate: 1e-4\nlr: 5.0\n", &output), 2) << output;
  EXPECT_NE(output.find("'learning_rate' (line 1) and 'lr' (line 2) both set learning_rate"),
            std::string::npos)
      << output;
}

}  // namespace
}  // namespace ferry::faults
