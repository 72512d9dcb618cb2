// The typed training config: values parsed once into what they mean, and where relative paths
// point (the file's folder for the file, the working directory for the command line).
#include "train/train_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(TrainConfig, ValuesAreParsedIntoWhatTheyMean) {
  const TrainConfig c = parse_train_config(
      "device: sim\ngpu_memory: 24GiB\nhost_memory: 1.5TB\nsave_dtype: bfloat16\ndata_format: alpaca\n"
      "offload_activations: none\nrecompute: all\nupdate_schedule: after-backward\nweight_upload: "
      "convert-on-upload\n",
      {}, "train.yaml");
  EXPECT_EQ(c.device, DeviceKind::Sim);
  EXPECT_EQ(c.gpu_memory, std::optional<int64_t>(int64_t{24} << 30));
  EXPECT_EQ(c.host_memory, std::optional<int64_t>(int64_t{1500000000000}));
  EXPECT_EQ(c.save_dtype, std::optional<DType>(DType::BF16));
  EXPECT_EQ(c.data_format, DataFormat::Alpaca);
  EXPECT_EQ(c.offload_activations, ActivationOffload::None);
  EXPECT_EQ(c.recompute, RecomputePolicy::All);
  EXPECT_EQ(c.update_schedule, std::optional<UpdateSchedule>(UpdateSchedule::AfterBackward));
  EXPECT_EQ(c.weight_upload, std::optional<WeightUpload>(WeightUpload::ConvertOnUpload));
}

TEST(TrainConfig, AutoLeavesTheChoiceToFerry) {
  const TrainConfig defaults = parse_train_config("", {}, "train.yaml");
  EXPECT_EQ(defaults.device, DeviceKind::Auto);
  EXPECT_FALSE(defaults.gpu_memory.has_value());
  EXPECT_FALSE(defaults.host_memory.has_value());
  EXPECT_FALSE(defaults.save_dtype.has_value());
  EXPECT_FALSE(defaults.update_schedule.has_value());
  EXPECT_FALSE(defaults.weight_upload.has_value());
  // Written out, auto means the same; an empty override clears a value the file set.
  const TrainConfig written = parse_train_config(
      "gpu_memory: 24GiB\nhost_memory: auto\nsave_dtype: auto\nupdate_schedule: auto\nweight_upload: auto\n",
      {"gpu_memory="}, "train.yaml");
  EXPECT_FALSE(written.gpu_memory.has_value());
  EXPECT_FALSE(written.host_memory.has_value());
  EXPECT_FALSE(written.save_dtype.has_value());
  EXPECT_FALSE(written.update_schedule.has_value());
  EXPECT_FALSE(written.weight_upload.has_value());
}

// head_groups (model/decoder_layer.h): auto leaves the count to the planner; a count is kept as
// given (the model's KV heads check it where the layer is carved); zero or negative is refused.
TEST(TrainConfig, HeadGroupsAreAutoOrACount) {
  EXPECT_EQ(parse_train_config("", {}, "t").head_groups, -1);
  EXPECT_EQ(parse_train_config("head_groups: auto\n", {}, "t").head_groups, -1);
  EXPECT_EQ(parse_train_config("head_groups: 4\n", {}, "t").head_groups, 4);
  EXPECT_EQ(parse_train_config("", {"head_groups=8"}, "t").head_groups, 8);
  EXPECT_TRUE(test::throws_with([] { parse_train_config("head_groups: 0\n", {}, "t"); },
                                {"head_groups", "divisor", "got 0"}));
}

TEST(TrainConfig, SweepsAreAutoOrACount) {
  EXPECT_EQ(parse_train_config("", {}, "t").sweeps, -1);
  EXPECT_EQ(parse_train_config("sweeps: auto\n", {}, "t").sweeps, -1);
  EXPECT_EQ(parse_train_config("sweeps: 1\n", {}, "t").sweeps, 1);
  EXPECT_EQ(parse_train_config("", {"sweeps=8"}, "t").sweeps, 8);
  EXPECT_TRUE(
      test::throws_with([] { parse_train_config("sweeps: 0\n", {}, "t"); }, {"sweeps", "1: none", "got 0"}));
}

TEST(TrainConfig, FilePathsAreRelativeToTheFileAndCommandLinePathsToTheWorkingDirectory) {
  test::ScratchDir dir("train-config-paths");
  std::filesystem::create_directories(dir / "project");
  const std::filesystem::path yaml = dir / "project" / "train.yaml";
  std::ofstream(yaml) << "model: base-model\ndata: [a.jsonl, /abs/b.jsonl]\noutput_dir: out\n";
  const TrainConfig from_file = load_train_config(yaml, {});
  EXPECT_EQ(from_file.model, dir / "project" / "base-model");
  ASSERT_EQ(from_file.data.size(), 2u);
  EXPECT_EQ(from_file.data[0], dir / "project" / "a.jsonl");
  EXPECT_EQ(from_file.data[1], std::filesystem::path("/abs/b.jsonl"));
  EXPECT_EQ(from_file.output_dir, dir / "project" / "out");

  // `ferry train project/train.yaml model=other-model` from `dir`: the shell completed other-model
  // against the working directory, and that is where it is looked for.
  const TrainConfig overridden = load_train_config(yaml, {"model=other-model", "data=c.jsonl"});
  EXPECT_EQ(overridden.model, std::filesystem::path("other-model"));
  ASSERT_EQ(overridden.data.size(), 1u);
  EXPECT_EQ(overridden.data[0], std::filesystem::path("c.jsonl"));
  EXPECT_EQ(overridden.output_dir, dir / "project" / "out");  // from the file, still the file's
}

TEST(TrainConfig, GradientAccumulationStepsGiveTheGlobalBatchAsHuggingFaceDoes) {
  const TrainConfig c = parse_train_config("per_device_train_batch_size: 4\ngradient_accumulation_steps: 8\n",
                                           {}, "train.yaml");
  EXPECT_EQ(c.micro_batch, 4);
  EXPECT_EQ(c.global_batch, 32);
  // Agreeing with global_batch is fine; disagreeing is an error naming both.
  EXPECT_EQ(parse_train_config("global_batch: 32\nmicro_batch: 4\n", {"gradient_accumulation_steps=8"}, "t")
                .global_batch,
            32);
  EXPECT_TRUE(test::throws_with(
      [] {
        parse_train_config("global_batch: 16\nmicro_batch: 4\ngradient_accumulation_steps: 8\n", {}, "t");
      },
      {"global_batch is 16", "gradient_accumulation_steps 8 is 32"}));
  EXPECT_TRUE(test::throws_with(
      [] { parse_train_config("micro_batch: auto\ngradient_accumulation_steps: 2\n", {}, "t"); },
      {"micro_batch", "auto"}));
  EXPECT_TRUE(test::throws_with([] { parse_train_config("gradient_accumulation_steps: 2\n", {}, "t"); },
                                {"micro_batch", "auto (the default", "set micro_batch to a number"}));
}

// Without micro_batch the planner picks it (the fastest divisor of global_batch that fits), as the
// examples ask for; a number or per_device_train_batch_size fixes it.
TEST(TrainConfig, MicroBatchIsThePlannersChoiceUnlessGiven) {
  EXPECT_EQ(parse_train_config("global_batch: 32\n", {}, "t").micro_batch, 0);
  EXPECT_EQ(parse_train_config("global_batch: 32\nmicro_batch: auto\n", {}, "t").micro_batch, 0);
  EXPECT_EQ(parse_train_config("global_batch: 32\nmicro_batch: 8\n", {}, "t").micro_batch, 8);
  EXPECT_EQ(parse_train_config("global_batch: 32\nper_device_train_batch_size: 2\n", {}, "t").micro_batch, 2);
}

TEST(TrainConfig, ChatTemplateKwargsAreAMappingOfTypedValues) {
  const TrainConfig c = parse_train_config(
      "chat_template_kwargs: {enable_thinking: false, tools: [a], n: 2}\n", {}, "train.yaml");
  EXPECT_EQ(c.chat_template_kwargs.dump(), R"({"enable_thinking":false,"tools":["a"],"n":2})");
  const TrainConfig cleared =
      parse_train_config("chat_template_kwargs: {x: 1}\n", {"chat_template_kwargs="}, "t");
  EXPECT_TRUE(cleared.chat_template_kwargs.empty());
  EXPECT_TRUE(test::throws_with([] { parse_train_config("chat_template_kwargs: true\n", {}, "t"); },
                                {"chat_template_kwargs", "mapping"}));
}

TEST(TrainConfig, ModelOrgSlashNameIsFoundInTheHuggingFaceCache) {
  test::ScratchDir dir("config-hub");
  const auto repo = dir / "hub" / "models--meta-llama--Llama-3.2-1B";
  std::filesystem::create_directories(repo / "snapshots" / "0123abcd");
  std::filesystem::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "0123abcd";
  std::filesystem::create_directories(dir / "project");
  std::ofstream(dir / "project" / "train.yaml") << "model: meta-llama/Llama-3.2-1B\n";
  ::setenv("HUGGINGFACE_HUB_CACHE", (dir / "hub").c_str(), 1);
  EXPECT_EQ(load_train_config(dir / "project" / "train.yaml", {}).model, repo / "snapshots" / "0123abcd");
  EXPECT_TRUE(
      test::throws_with([&] { load_train_config(dir / "project" / "train.yaml", {"model=org/none"}); },
                        {"org/none", (dir / "hub" / "models--org--none").string()}));
  ::unsetenv("HUGGINGFACE_HUB_CACHE");
}

TEST(TrainConfig, AMissingFileSaysWhichAndWhy) {
  try {
    load_train_config("/nonexistent/train.yaml", {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/train.yaml (No such file or directory)"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainConfig, TheDiskTierHoldsEveryFormat) {
  const TrainConfig c =
      parse_train_config("", {"disk_memory=100GiB", "disk_dir=/tmp", "optimizer_state=bf16sr_q8"}, "test");
  EXPECT_EQ(c.optimizer_state, OptimizerStateFormat::Bf16SrQ8);
  EXPECT_NO_THROW(parse_train_config("", {"disk_memory=100GiB", "disk_dir=/tmp"}, "test"));
}

// Batch counts are bounded (2^31 - 1 sequences, 1024 devices) and their products checked: values
// near 2^32 or 2^62 wrapped to a micro_batch x gpus of 0 (a division by zero, SIGFPE) or a global
// batch of 0.
TEST(TrainConfig, BatchCountsAreBoundedAndTheirProductsChecked) {
  const auto config = [](std::vector<std::string> overrides) {
    return parse_train_config("", overrides, "t");
  };
  EXPECT_TRUE(test::throws_with(
      [&] {
        config({"micro_batch=4294967296", "global_batch=4294967296", "gpus=4294967296", "device=sim"});
      },
      {"global_batch must be between 1 and 2147483647", "got 4294967296"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        config({"micro_batch=4611686018427387904", "gradient_accumulation_steps=4"});
      },
      {"micro_batch) 4611686018427387904", "gradient_accumulation_steps 4", "more than 2147483647"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        config({"micro_batch=65536", "gradient_accumulation_steps=65536"});
      },
      {"gradient_accumulation_steps 65536", "more than 2147483647"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        config({"micro_batch=4294967296", "global_batch=8"});
      },
      {"micro_batch must be between 1 and 2147483647", "got 4294967296"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        config({"gpus=1025", "global_batch=1025", "device=sim"});
      },
      {"gpus must be between 1 and 1024", "got 1025"}));
  EXPECT_TRUE(test::throws_with([&] { config({"seq_len=2147483648"}); },
                                {"seq_len must be between 2 and 2147483647", "got 2147483648"}));
  // The bounds themselves are fine.
  EXPECT_EQ(config({"global_batch=2147483647", "micro_batch=2147483647"}).global_batch, 2147483647);
  EXPECT_EQ(config({"micro_batch=2", "gradient_accumulation_steps=4", "gpus=4", "device=sim"}).global_batch,
            8);
  EXPECT_EQ(config({"global_batch=1024", "micro_batch=1", "gpus=1024", "device=sim"}).gpus, 1024);
}

// epochs becomes a step count (epochs x rows / global_batch, cast to an integer): a value that is
// not finite, negative or absurdly large is refused here, since 1e300 trained one step.
TEST(TrainConfig, EpochsAreAFiniteBoundedNumberOfPasses) {
  const auto config = [](std::vector<std::string> overrides) {
    return parse_train_config("", overrides, "t");
  };
  EXPECT_TRUE(
      test::throws_with([&] { config({"epochs=1e300"}); }, {"epochs", "between 0 and 1000000", "1e+300"}));
  EXPECT_TRUE(test::throws_with([&] { config({"epochs=1e300", "max_steps=10"}); }, {"epochs", "1000000"}));
  EXPECT_TRUE(test::throws_with([&] { config({"epochs=-1", "max_steps=10"}); }, {"epochs", "got -1"}));
  EXPECT_TRUE(test::throws_with([&] { config({"epochs=.inf"}); }, {"epochs", "got inf"}));
  EXPECT_TRUE(test::throws_with([&] { config({"epochs=.nan"}); }, {"epochs", "got nan"}));
  EXPECT_TRUE(test::throws_with([&] { config({"epochs=0"}); }, {"set max_steps or epochs"}));
  EXPECT_DOUBLE_EQ(config({"epochs=1e6"}).epochs, 1e6);
  EXPECT_DOUBLE_EQ(config({"epochs=0", "max_steps=5"}).epochs, 0.0);
}

// A GPU slot holds one streamed layer; the planner searches 2 to 4. A billion slots kept `ferry plan`
// scheduling for minutes (and 7 GB): at most 64.
TEST(TrainConfig, GpuSlotsAreBounded) {
  EXPECT_TRUE(test::throws_with([] { parse_train_config("", {"gpu_slots=1000000000"}, "t"); },
                                {"gpu_slots must be between 1 and 64", "resident_layers", "got 1000000000"}));
  EXPECT_TRUE(
      test::throws_with([] { parse_train_config("", {"gpu_slots=-1"}, "t"); }, {"gpu_slots", "got -1"}));
  EXPECT_EQ(parse_train_config("", {"gpu_slots=64"}, "t").gpu_slots, 64);
  EXPECT_EQ(parse_train_config("", {}, "t").gpu_slots, 0);
}

// A key with nothing after its colon, or a list where one value goes: the message says what is
// missing and what the key takes.
TEST(TrainConfig, AnEmptyValueOrAListIsNamed) {
  EXPECT_TRUE(test::throws_with([] { parse_train_config("seq_len:\n", {}, "t"); },
                                {"'seq_len' has no value", "an integer", "remove the line"}));
  EXPECT_TRUE(test::throws_with([] { parse_train_config("learning_rate: [1, 2]\n", {}, "t"); },
                                {"'learning_rate' must be a number, got a list"}));
  EXPECT_TRUE(test::throws_with([] { parse_train_config("seq_len: many\n", {}, "t"); },
                                {"'seq_len' must be an integer, got 'many'"}));
}

}  // namespace
}  // namespace ferry
