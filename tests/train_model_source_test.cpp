// `model: preset:ARCH/NAME` (train/model_source.h): training from a preset's random weights made in
// memory, as from the directory `ferry init` writes of it, and outputs that say what they hold.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "model/model_weights.h"
#include "test_util.h"
#include "train/model_init.h"
#include "train/model_source.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

class PresetModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = scratch_ / "train.jsonl";
    test::write_token_data(data_, 60, 320, 11);
  }
  TrainConfig config(const std::string& model, const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {"model=" + model,
                                          "data=" + data_.string(),
                                          "output_dir=" + (scratch_ / out).string(),
                                          "seq_len=32",
                                          "global_batch=4",
                                          "max_steps=3",
                                          "learning_rate=1e-3",
                                          "save_dtype=float32",
                                          "threads=2",
                                          "seed=5"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }
  std::vector<double> losses(const TrainConfig& c) {
    std::vector<double> out;
    TrainHooks hooks;
    hooks.on_step = [&](const StepRecord& r) { out.push_back(r.loss); };
    EXPECT_TRUE(run_training(c, hooks).finished);
    return out;
  }
  test::ScratchDir scratch_{"preset"};
  std::filesystem::path data_;
};

TEST_F(PresetModelTest, TrainsAsTheDirectoryFerryInitWrites) {
  // The tiny preset is fp32, so the directory holds exactly the weights made in memory.
  write_random_model(preset_config("qwen3", "tiny"), 5, scratch_ / "init");
  const auto from_dir = losses(config((scratch_ / "init").string(), "a"));
  const auto from_preset = losses(config("preset:qwen3/tiny", "b"));
  ASSERT_EQ(from_dir.size(), 3u);
  EXPECT_EQ(from_dir, from_preset);
}

TEST_F(PresetModelTest, OutputsSayTheyHoldRandomWeights) {
  losses(config("preset:qwen3/tiny", "out", {"save_steps=2"}));
  for (const auto& dir : {scratch_ / "out", scratch_ / "out" / "checkpoint-2"}) {
    std::ifstream in(dir / "config.json");
    const nlohmann::json json = nlohmann::json::parse(in);
    EXPECT_EQ(json.value("_name_or_path", ""), "ferry-random-init/qwen3/tiny") << dir;
    EXPECT_NE(json.value("ferry_random_init", "").find("not the published model"), std::string::npos) << dir;
    EXPECT_EQ(json.value("architectures", nlohmann::json()).at(0), "Qwen3ForCausalLM");
  }
}

// preset:DIR trains random weights of the shape DIR's config.json gives: here a preset's config
// with a longer context, which trains as the preset does and whose outputs keep the edit and say
// what they hold.
TEST_F(PresetModelTest, ADirectorysConfigIsAShapeOfOnesOwn) {
  const std::filesystem::path dir = scratch_ / "long";
  ModelConfig longer = preset_config("qwen3", "tiny");
  longer.raw["max_position_embeddings"] = 4 * longer.raw["max_position_embeddings"].get<int64_t>();
  write_model_config_only(parse_model_config(longer.raw, "test"), dir);
  EXPECT_EQ(losses(config("preset:" + dir.string(), "a")), losses(config("preset:qwen3/tiny", "b")));
  std::ifstream in(scratch_ / "a" / "config.json");
  const nlohmann::json json = nlohmann::json::parse(in);
  EXPECT_EQ(json.at("max_position_embeddings"), longer.raw["max_position_embeddings"]);
  EXPECT_EQ(json.value("_name_or_path", ""), "ferry-random-init/long");
  EXPECT_EQ(model_source_config("preset:" + dir.string() + "/", 5).raw.value("_name_or_path", ""),
            "ferry-random-init/long");
  EXPECT_NE(json.value("ferry_random_init", "").find("not the published model"), std::string::npos);
  // A directory without a config.json is no shape: the error says what to write.
  EXPECT_TRUE(test::throws_with([&] { run_training(config("preset:" + scratch_.path().string(), "c")); },
                                {"preset:DIR", "config.json"}));
}

TEST_F(PresetModelTest, BadPresetsAndTextWithoutATokenizerAreClearErrors) {
  EXPECT_TRUE(test::throws_with([&] { run_training(config("preset:llama", "x")); }, {"preset:ARCH/NAME"}));
  EXPECT_TRUE(test::throws_with([&] { run_training(config("preset:llama/llama-9b", "y")); },
                                {"no preset 'llama-9b'", "llama-3.1-8b"}));
  const auto text = scratch_ / "text.jsonl";
  std::ofstream(text) << "{\"text\": \"hello\"}\n";
  TrainConfig c = config("preset:llama/tiny", "z");
  c.data = {text};
  EXPECT_TRUE(test::throws_with([&] { run_training(c); }, {"no tokenizer", "tokenizer:"}));
}

// A run reads its weights one unit at a time (ModelWeights::deferred): each unit, in any order,
// is what reading them all gives -- a preset's drawn alone as when drawn with the others, a
// directory's read alone -- and a directory whose tensors disagree with its config is refused
// before anything is read, as it is when read whole.
TEST_F(PresetModelTest, DeferredUnitsAreTheWeightsReadWhole) {
  const ModelWeights deferred = deferred_model_source_weights("preset:llama/tiny", 5);
  ASSERT_TRUE(deferred.deferred());
  std::vector<std::vector<float>> whole;
  init_random_weights(deferred.config, 5, whole);
  // The loaders write every value, the zeros between parameters too: a run gives them memory that
  // holds anything (here a value no weight has).
  std::vector<float> unit;
  const auto load = [&unit](const ModelWeights& w, size_t u) {
    unit.assign(static_cast<size_t>(w.layout.units[u].numel), -12345.0f);
    w.loader(u, unit);
  };
  for (size_t u = whole.size(); u-- > 0;) {
    load(deferred, u);
    EXPECT_EQ(unit, whole[u]) << "unit " << u;
  }
  const ModelWeights other_seed = model_source_weights("preset:llama/tiny", 6);
  ASSERT_FALSE(other_seed.deferred());
  EXPECT_NE(other_seed.units[1], whole[1]);

  const std::filesystem::path dir = scratch_ / "tiny";
  write_random_model(preset_config("llama", "tiny"), 7, dir);
  const ModelWeights read = load_model_weights(dir);
  const ModelWeights lazily = deferred_model_source_weights(dir, 0);
  ASSERT_TRUE(lazily.deferred());
  for (size_t u = read.units.size(); u-- > 0;) {
    load(lazily, u);
    EXPECT_EQ(unit, read.units[u]) << "unit " << u;
  }
  nlohmann::json cfg;
  std::ifstream(dir / "config.json") >> cfg;
  cfg["intermediate_size"] = 2 * cfg["intermediate_size"].get<int>();
  std::ofstream(dir / "config.json") << cfg.dump();
  EXPECT_THROW(deferred_model_source_weights(dir, 0), Error);
}

// `ferry init` writes the weights a piece at a time as it makes them: the directory holds the
// preset's values (in its dtype), a tensor of several pieces too, and every unit's alignment
// between parameters is zeros.
TEST_F(PresetModelTest, TheDirectoryHoldsThePresetsWeightsMadeAPieceAtATime) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    nlohmann::json json = preset_config("qwen2", "tiny").raw;  // k/v biases of 32 values, aligned to 64
    json["vocab_size"] = 70000;  // an embedding of 70000 x 64: two of the writer's 4M-value pieces
    json["tie_word_embeddings"] = false;
    json["torch_dtype"] = dtype;
    const ModelConfig config = parse_model_config(json, "test");
    const std::filesystem::path dir = scratch_ / (std::string("pieces-") + dtype);
    write_random_model(config, 11, dir);
    const ModelWeights read = load_model_weights(dir);
    std::vector<std::vector<float>> whole;
    init_random_weights(config, 11, whole);
    ASSERT_EQ(read.units.size(), whole.size());
    for (size_t u = 0; u < whole.size(); ++u) {
      const UnitLayout& unit = read.layout.units[u];
      int64_t covered = 0;
      for (const ParamSlot& p : unit.params) {
        for (int64_t i = 0; i < p.numel; ++i) {
          const float made = whole[u][p.offset + i];
          const float expected = config.dtype == DType::BF16 ? bf16_to_f32(f32_to_bf16(made)) : made;
          ASSERT_EQ(read.units[u][p.offset + i], expected) << p.hf_name << "[" << i << "]";
        }
        for (int64_t i = covered; i < p.offset; ++i)
          ASSERT_EQ(whole[u][i], 0.0f) << "alignment before " << p.hf_name;
        covered = p.offset + p.numel;
      }
      for (int64_t i = covered; i < unit.numel; ++i) ASSERT_EQ(whole[u][i], 0.0f) << "alignment, unit " << u;
    }
  }
}

TEST(PresetModel, RealShapesHaveTheirParameterCounts) {
  // Published sizes: the parameter counts of the shapes, within 1%.
  const std::pair<const char*, double> shapes[] = {
      {"preset:mistral/mistral-nemo-12b", 12.25e9}, {"preset:qwen2/qwen2.5-14b", 14.77e9},
      {"preset:qwen3/qwen3-14b", 14.77e9},          {"preset:mistral/mistral-small-24b", 23.57e9},
      {"preset:qwen3/qwen3-32b", 32.76e9},          {"preset:llama/llama-3.3-70b", 70.55e9}};
  for (const auto& [name, params] : shapes) {
    const ModelConfig c = model_source_config(name, 1);
    EXPECT_NEAR(static_cast<double>(build_model_layout(c).parameter_count()) / params, 1.0, 0.01) << name;
  }
}

}  // namespace
}  // namespace ferry
