// The generation loop (generate/generator.h) on the CPU: greedy decoding with the KV cache picks
// the tokens a full forward over the growing sequence picks; it stops at a stop id, at
// max_new_tokens and at the end of the context; a later prompt that extends the cached tokens
// feeds only the rest, with the same result as a fresh start.
#include <algorithm>
#include <fstream>

#include "device/device.h"
#include "generate/generation_model.h"
#include "generate/generator.h"
#include "generate_full_forward.h"
#include "hf_golden.h"
#include "ops/device_ops.h"
#include "test_util.h"

namespace ferry {
namespace {

struct Rig {
  ModelWeights weights;
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<ResidentModel> model;

  explicit Rig(const std::string& name) : weights(load_model_weights(test::fixtures_dir() / "hf" / name)) {
    SimDeviceOptions options;
    options.require_pinned_host = false;
    device = make_sim_device(options);
    ops = make_device_ops(*device);
    model = std::make_unique<ResidentModel>(*device, weights.config, DType::F32, [&](size_t u, float* dst) {
      std::copy(weights.units[u].begin(), weights.units[u].end(), dst);
    });
  }
};

// Greedy tokens after `prompt` from full forwards over the whole sequence, one per new token.
std::vector<int32_t> greedy_by_full_forward(const ModelWeights& w, std::vector<int32_t> ids, int count) {
  std::vector<int32_t> out;
  const int64_t V = w.config.vocab_size;
  for (int i = 0; i < count; ++i) {
    const std::vector<float> logits = test::full_forward_logits(w, ids);
    const float* last = logits.data() + (ids.size() - 1) * static_cast<size_t>(V);
    const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

std::vector<int32_t> prompt_of(const std::string& name, size_t length) {
  const test::Golden g(test::fixtures_dir() / "hf" / name);
  const auto ids = g.i64("input_ids");
  return std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(length));
}

class GreedyGeneration : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyGeneration, PicksWhatTheFullForwardPicks) {
  Rig rig(GetParam());
  const std::vector<int32_t> prompt = prompt_of(GetParam(), 6);
  const std::vector<int32_t> expected = greedy_by_full_forward(rig.weights, prompt, 12);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, 64);
  Generator generator(decoder, {});
  Sampler greedy(SamplingOptions{});
  std::vector<int32_t> streamed;
  const GenerationResult r =
      generator.generate(prompt, greedy, 12, [&](int32_t t) { streamed.push_back(t); });
  EXPECT_EQ(r.tokens, expected);
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.prompt_tokens, 6);
  EXPECT_EQ(r.reused_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, GreedyGeneration,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "tied"));

TEST(Generator, StopsAtAStopIdWithoutEmittingIt) {
  Rig rig("qwen2");
  const std::vector<int32_t> prompt = prompt_of("qwen2", 5);
  const std::vector<int32_t> free_run = greedy_by_full_forward(rig.weights, prompt, 8);
  // The first position of a token not seen before it: generation must stop there.
  size_t stop_at = 1;
  while (std::find(free_run.begin(), free_run.begin() + stop_at, free_run[stop_at]) !=
         free_run.begin() + stop_at)
    ++stop_at;
  ASSERT_LT(stop_at, free_run.size());
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, 64);
  Generator generator(decoder, {free_run[stop_at], 95});
  Sampler greedy(SamplingOptions{});
  const GenerationResult r = generator.generate(prompt, greedy, 8);
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + stop_at));

  const GenerationResult none = generator.generate(prompt, greedy, 0);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.finish, FinishReason::Length);
}

TEST(Generator, StopsWhenTheContextIsFull) {
  Rig rig("llama3");
  const std::vector<int32_t> prompt = prompt_of("llama3", 6);
  // Three cache rows after the prompt: three tokens fed, and a fourth chosen from the last logits.
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, 9);
  Generator generator(decoder, {});
  Sampler greedy(SamplingOptions{});
  const GenerationResult r = generator.generate(prompt, greedy, 100);
  EXPECT_EQ(r.finish, FinishReason::Context);
  EXPECT_EQ(r.tokens, greedy_by_full_forward(rig.weights, prompt, 4));
  EXPECT_TRUE(test::throws_with([&] { generator.generate(prompt_of("llama3", 10), greedy, 1); },
                                {"the prompt has 10 tokens, more than the context of 9", "--context"}));
}

TEST(Generator, ALongerPromptReusesTheCachedTokens) {
  Rig rig("mistral");
  const std::vector<int32_t> prompt = prompt_of("mistral", 5);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, 64);
  Generator generator(decoder, {});
  Sampler greedy(SamplingOptions{});
  const GenerationResult first = generator.generate(prompt, greedy, 4);
  // The next turn: the prompt, the reply and two more tokens.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  next.push_back(3);
  next.push_back(4);
  const GenerationResult second = generator.generate(next, greedy, 5);
  // The last reply token was chosen but never fed: the cache holds the rest.
  EXPECT_EQ(second.reused_tokens, static_cast<int64_t>(prompt.size() + first.tokens.size() - 1));
  EXPECT_EQ(second.tokens, greedy_by_full_forward(rig.weights, next, 5));
  // The same prompt again reuses all but its last token, which is fed for its logits.
  const GenerationResult again = generator.generate(next, greedy, 5);
  EXPECT_EQ(again.reused_tokens, static_cast<int64_t>(next.size()) - 1);
  EXPECT_EQ(again.tokens, second.tokens);
  generator.reset();
  EXPECT_EQ(generator.generate(next, greedy, 5).reused_tokens, 0);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// A model too large for the host is refused from its config.json alone (the directory holds no
// weights), with the sizes and what to do; so are a missing model and a context past the model's.
TEST(GenerationModel, RefusesWhatCannotRun) {
  test::ScratchDir dir("generation-model-refusals");
  EXPECT_TRUE(test::throws_with([&] { open_generation_model(dir / "none", GenerationBackend::Cpu, 0); },
                                {"has no config.json", "Hugging Face model directory"}));
  nlohmann::json config =
      nlohmann::json::parse(test::read_file(test::fixtures_dir() / "hf" / "llama3" / "config.json"));
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_TRUE(test::throws_with([&] { open_generation_model(dir.path(), GenerationBackend::Cpu, 300); },
                                {"--context 300", "1 to 256 tokens"}));
  config["hidden_size"] = 16384;
  config["intermediate_size"] = 53248;
  config["num_hidden_layers"] = 126;
  config["num_attention_heads"] = 128;
  config["num_key_value_heads"] = 8;
  config["vocab_size"] = 128256;
  config.erase("head_dim");
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_TRUE(test::throws_with([&] { open_generation_model(dir.path(), GenerationBackend::Cpu, 16); },
                                {"does not fit host memory", "fp32 weights take"}));
}

}  // namespace
}  // namespace ferry
