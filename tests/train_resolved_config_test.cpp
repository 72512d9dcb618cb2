// config.yaml, the resolved configuration a run writes: every key with its value, and read back it
// is the same configuration.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>

#include "test_util.h"
#include "train/resolved_config.h"

namespace ferry {
namespace {

TEST(ResolvedConfig, HoldsEveryKey) {
  const YAML::Node root = YAML::Load(resolved_config_yaml(TrainConfig{}));
  std::set<std::string> written;
  for (const auto& item : root) written.insert(item.first.Scalar());
  const std::vector<std::string> keys = train_config_keys();
  EXPECT_EQ(written, std::set<std::string>(keys.begin(), keys.end()));
}

TEST(ResolvedConfig, ReadsBackAsTheSameConfig) {
  const TrainConfig c = parse_train_config(
      "model: /m\ndata: [/a.jsonl, /b.jsonl]\noutput_dir: /out\nlearning_rate: 3.1e-5\nseq_len: 512\n"
      "per_device_train_batch_size: 2\ngradient_accumulation_steps: 8\ndevice: sim\ngpu_memory: 24GiB\n"
      "save_dtype: bfloat16\nupdate_schedule: after-backward\nlr_scheduler_type: linear\nwarmup_ratio: 0.1\n"
      "chat_template_kwargs: {enable_thinking: false, name: \"x\", n: 3}\ntrace_steps: [3, 5]\n",
      {}, "train.yaml");
  const std::string text = resolved_config_yaml(c);
  const TrainConfig back = parse_train_config(text, {}, "config.yaml");
  EXPECT_EQ(resolved_config_yaml(back), text);
  EXPECT_EQ(back.global_batch, 16);
  EXPECT_EQ(back.micro_batch, 2);
  EXPECT_DOUBLE_EQ(back.learning_rate, 3.1e-5);
  EXPECT_EQ(back.gpu_memory, std::optional<int64_t>(int64_t{24} << 30));
  EXPECT_EQ(back.chat_template_kwargs.dump(), R"({"enable_thinking":false,"name":"x","n":3})");
  EXPECT_EQ(back.data.size(), 2u);
}

}  // namespace
}  // namespace ferry
