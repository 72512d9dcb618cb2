// End-to-end training on the CPU: exact resume, the output directory, and bad input.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/model_weights.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/checkpoint.h"
#include "train/model_init.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = scratch_ / "model";
    write_random_model(preset_config("qwen3", "tiny"), 7, model_dir_);
    // A tokenizer file the output must carry byte for byte.
    std::ofstream(model_dir_ / "tokenizer.json")
        << "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}  \n";
    data_ = scratch_ / "train.jsonl";
    test::write_token_data(data_, 120, 320, 11);
  }
  TrainConfig config(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = test::tiny_run_overrides(model_dir_, data_, scratch_ / out);
    overrides.insert(overrides.end(), {"weight_decay=0.1", "max_grad_norm=0.5", "threads=2"});
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }

  test::ScratchDir scratch_{"train"};
  std::filesystem::path model_dir_, data_;
};

TEST_F(TrainTest, ResumeIsBitExact) {
  std::vector<double> uninterrupted;
  TrainHooks record_all;
  record_all.on_step = [&](const StepRecord& r) { uninterrupted.push_back(r.loss); };
  ASSERT_TRUE(run_training(config("full"), record_all).finished);
  ASSERT_EQ(uninterrupted.size(), 6u);

  TrainHooks stop;
  stop.stop_after_steps = 3;
  const TrainSummary first = run_training(config("split"), stop);
  ASSERT_FALSE(first.finished);
  ASSERT_EQ(first.final_step, 3);
  ASSERT_TRUE(find_latest_checkpoint(scratch_ / "split").has_value());

  // The resume takes the state from the checkpoint alone: the model's weights are not read (NaN
  // in them now, which reading refuses), and the run goes on exactly.
  const std::filesystem::path weights_file = model_dir_ / "model.safetensors";
  const std::string original = test::read_file(weights_file);
  uint64_t header = 0;
  std::memcpy(&header, original.data(), 8);
  std::string poisoned = original;
  std::fill(poisoned.begin() + 8 + static_cast<std::ptrdiff_t>(header), poisoned.end(), '\xff');
  std::ofstream(weights_file, std::ios::binary | std::ios::trunc) << poisoned;
  std::vector<double> resumed;
  TrainHooks record_rest;
  record_rest.on_step = [&](const StepRecord& r) { resumed.push_back(r.loss); };
  const bool finished = run_training(config("split", {"resume=true"}), record_rest).finished;
  std::ofstream(weights_file, std::ios::binary | std::ios::trunc) << original;
  ASSERT_TRUE(finished);
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], uninterrupted[3 + i]) << "step " << 4 + i;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(first.steps[i].loss, uninterrupted[i]) << "step " << 1 + i;
  EXPECT_EQ(test::read_file(scratch_ / "full" / "model.safetensors"),
            test::read_file(scratch_ / "split" / "model.safetensors"));
  EXPECT_TRUE(test::weights_moved(scratch_ / "full", model_dir_));  // equal outputs of a run that trained
}

TEST_F(TrainTest, ResumeRefusesAChangedBatchGeometry) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("geom"), stop);
  try {
    run_training(config("geom", {"resume=true", "global_batch=8"}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("global_batch"), std::string::npos) << e.what();
  }
}

// The seed only orders the data: without shuffling, two seeds train on the same batches.
TEST_F(TrainTest, WithoutShuffleTheDataOrderIgnoresTheSeed) {
  auto losses = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<double> out_losses;
    TrainHooks hooks;
    hooks.on_step = [&](const StepRecord& r) { out_losses.push_back(r.loss); };
    run_training(config(out, extra), hooks);
    return out_losses;
  };
  EXPECT_EQ(losses("a", {"shuffle=false", "seed=1"}), losses("b", {"shuffle=false", "seed=2"}));
  EXPECT_NE(losses("c", {"seed=1"}), losses("d", {"seed=2"}));
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("e", {"shuffle=false"}), stop);
  try {
    run_training(config("e", {"resume=true"}));
    FAIL() << "expected a refusal: the checkpoint was written without shuffling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shuffle"), std::string::npos) << e.what();
  }
}

TEST_F(TrainTest, OutputDirectoryRoundTrips) {
  TrainConfig c = config("out", {"max_steps=1", "save_steps=1", "warmup_steps=0"});
  ASSERT_TRUE(run_training(c).finished);
  const auto out = scratch_ / "out";
  // Tokenizer bytes and (unchanged dtype) config.json are copied exactly.
  EXPECT_EQ(test::read_file(out / "tokenizer.json"), test::read_file(model_dir_ / "tokenizer.json"));
  EXPECT_EQ(test::read_file(out / "config.json"), test::read_file(model_dir_ / "config.json"));
  SafetensorsFile weights_file = SafetensorsFile::open(out / "model.safetensors");
  EXPECT_EQ(weights_file.metadata().at("format"), "pt");

  // The output loads back with exactly the trained fp32 masters of the final checkpoint.
  ModelWeights loaded = load_model_weights(out);
  SafetensorsFile state = SafetensorsFile::open(out / "checkpoint-1" / "optimizer.safetensors");
  ModelWeights initial = load_model_weights(model_dir_);
  bool changed = false;
  for (size_t u = 0; u < loaded.layout.units.size(); ++u) {
    for (const auto& p : loaded.layout.units[u].params) {
      const TensorInfo* master = state.find("master." + p.hf_name);
      ASSERT_NE(master, nullptr) << p.hf_name;
      const float* m = static_cast<const float*>(state.data(*master));
      const float* l = loaded.units[u].data() + p.offset;
      for (int64_t i = 0; i < p.numel; ++i) ASSERT_EQ(l[i], m[i]) << p.hf_name << "[" << i << "]";
      changed |= std::memcmp(l, initial.units[u].data() + p.offset, static_cast<size_t>(p.numel) * 4) != 0;
    }
  }
  EXPECT_TRUE(changed) << "one step must change the weights";
}

TEST_F(TrainTest, SavesInTheInputDtypeAndEditsOnlyThatKey) {
  // A bf16 input model comes back as bf16 unless asked otherwise.
  const auto bf16_model = scratch_ / "bf16";
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["torch_dtype"] = "bfloat16";
  write_random_model(parse_model_config(json, "test"), 3, bf16_model);
  TrainConfig c = config("bf16-out", {"model=" + bf16_model.string(), "max_steps=1", "save_dtype=auto"});
  ASSERT_TRUE(run_training(c).finished);
  SafetensorsFile f = SafetensorsFile::open(scratch_ / "bf16-out" / "model.safetensors");
  for (const auto& t : f.tensors()) EXPECT_EQ(t.dtype, DType::BF16) << t.name;
  EXPECT_EQ(test::read_file(scratch_ / "bf16-out" / "config.json"),
            test::read_file(bf16_model / "config.json"));

  TrainConfig as_f32 =
      config("f32-out", {"model=" + bf16_model.string(), "max_steps=1", "save_dtype=float32"});
  ASSERT_TRUE(run_training(as_f32).finished);
  nlohmann::json in = nlohmann::json::parse(test::read_file(bf16_model / "config.json"));
  nlohmann::json out = nlohmann::json::parse(test::read_file(scratch_ / "f32-out" / "config.json"));
  EXPECT_EQ(out["torch_dtype"], "float32");
  out["torch_dtype"] = in["torch_dtype"];
  EXPECT_EQ(in, out) << "only the dtype key may change";
}

TEST_F(TrainTest, MalformedDataIsAClearErrorAndNothingIsWritten) {
  std::ofstream(data_, std::ios::app) << "{\"input_ids\": [1, 2, \"x\"]}\n";
  try {
    run_training(config("bad"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train.jsonl:121"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(scratch_ / "bad" / "model.safetensors"));
  // With skip_malformed the run goes on.
  EXPECT_TRUE(run_training(config("skip", {"skip_malformed=true", "max_steps=1"})).finished);
}

TEST_F(TrainTest, OutputMayNotOverwriteTheInputModel) {
  try {
    run_training(config("x", {"output_dir=" + model_dir_.string(), "max_steps=1"}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input model directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// `device: sim` trains through the sliding engine on the simulated device, planned by the default
// planner within gpu_memory; its losses and output are bit-identical to the CPU backend's.
TEST_F(TrainTest, SimulatedDeviceMatchesTheCpuBackendBitForBit) {
  std::vector<double> cpu_losses, sim_losses;
  TrainHooks on_cpu, on_sim;
  on_cpu.on_step = [&](const StepRecord& r) { cpu_losses.push_back(r.loss); };
  on_sim.on_step = [&](const StepRecord& r) { sim_losses.push_back(r.loss); };
  ASSERT_TRUE(run_training(config("cpu", {"device=cpu"}), on_cpu).finished);
  ASSERT_TRUE(run_training(config("sim", {"device=sim", "gpu_memory=3MiB", "gpu_slots=2"}), on_sim).finished);
  ASSERT_EQ(cpu_losses, sim_losses);
  EXPECT_EQ(test::read_file(scratch_ / "cpu" / "model.safetensors"),
            test::read_file(scratch_ / "sim" / "model.safetensors"));
}

TEST_F(TrainTest, SimulatedResumeIsBitExact) {
  std::vector<double> full, rest;
  TrainHooks all, stop, tail;
  all.on_step = [&](const StepRecord& r) { full.push_back(r.loss); };
  ASSERT_TRUE(run_training(config("sfull", {"device=sim", "offload_activations=all"}), all).finished);
  stop.stop_after_steps = 3;
  run_training(config("ssplit", {"device=sim", "offload_activations=all"}), stop);
  tail.on_step = [&](const StepRecord& r) { rest.push_back(r.loss); };
  ASSERT_TRUE(run_training(config("ssplit", {"device=sim", "offload_activations=all", "resume=true"}), tail)
                  .finished);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]);
}

// micro_batch: auto leaves the micro-chunk size to the planner (a divisor of global_batch); the
// steps' batches are cut as it chose, or the engine would refuse them. On the cpu backend: 1.
TEST_F(TrainTest, MicroBatchAutoIsThePlannersChoice) {
  for (const char* device : {"device=sim", "device=cpu"}) {
    std::vector<double> losses;
    TrainHooks hooks;
    hooks.on_step = [&](const StepRecord& r) { losses.push_back(r.loss); };
    ASSERT_TRUE(run_training(config(std::string("auto-") + (device + 7), {device, "micro_batch=auto"}), hooks)
                    .finished);
    ASSERT_FALSE(losses.empty());
    for (double loss : losses) EXPECT_TRUE(std::isfinite(loss)) << device;
  }
}

// The plan's line in train.log names the profile it was planned with: measured now by the first
// run on this machine, then the cached one, which the second run reads instead of measuring again.
TEST_F(TrainTest, ThePlansLineNamesAProfileMeasuredNowThenTheCachedOne) {
  // This test's own cache, the suite's restored however the test ends.
  struct CacheDir {
    std::optional<std::string> previous;
    explicit CacheDir(const std::filesystem::path& dir) {
      if (const char* p = std::getenv("FERRY_CACHE_DIR")) previous = p;
      setenv("FERRY_CACHE_DIR", dir.c_str(), 1);
    }
    ~CacheDir() {
      if (previous)
        setenv("FERRY_CACHE_DIR", previous->c_str(), 1);
      else
        unsetenv("FERRY_CACHE_DIR");
    }
  } cache(scratch_ / "cache");
  auto plan_line = [&](const std::string& out) {
    if (!run_training(config(out, {"device=sim", "gpu_memory=3MiB", "gpu_slots=2", "max_steps=1"})).finished)
      return out + " did not finish";
    std::istringstream log(test::read_file(scratch_ / out / "train.log"));
    std::string line, found;
    while (std::getline(log, line))
      if (line.find("plan: ") != std::string::npos && line.find("predicted step") != std::string::npos)
        found = line;
    return found;
  };
  const std::string first = plan_line("first");
  const std::string second = plan_line("second");
  EXPECT_NE(first.find("(profile: sim, measured now)"), std::string::npos) << first;
  EXPECT_NE(second.find("(profile: sim, cached)"), std::string::npos) << second;
}

TEST_F(TrainTest, AnImpossibleBudgetIsRefusedUpFront) {
  try {
    run_training(config("small", {"device=sim", "gpu_memory=64KiB"}));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give gpu_memory of at least"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
