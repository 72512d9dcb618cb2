// The choice of the next token (generate/sampler.h), what generation_config.json says
// (generate/generation_config.h), and the streamed text of a reply (generate/text_stream.h).
#include <cmath>
#include <fstream>

#include "core/utf8.h"
#include "data_test_tokenizer.h"
#include "generate/generation_config.h"
#include "generate/sampler.h"
#include "generate/text_stream.h"
#include "test_util.h"

namespace ferry {
namespace {

std::vector<int> histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler.next(logits.data(), logits.size()))];
  return counts;
}

TEST(Sampler, GreedyTakesTheFirstLargest) {
  Sampler greedy(SamplingOptions{});
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(greedy.next(logits.data(), 4), 1);
}

TEST(Sampler, DrawsFromTheSoftmaxOfTheScaledLogits) {
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 11;
  Sampler sampler(o);
  const int draws = 20000;
  const auto counts = histogram(sampler, logits, draws);
  EXPECT_NEAR(counts[0] / double(draws), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(draws), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(draws), 0.2, 0.02);
  // Temperature 2 flattens: p ~ sqrt(p0), i.e. 0.42, 0.33, 0.26.
  o.temperature = 2.0;
  Sampler flat(o);
  const auto flat_counts = histogram(flat, logits, draws);
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  EXPECT_NEAR(flat_counts[2] / double(draws), std::sqrt(0.2) / z, 0.02);
}

TEST(Sampler, TopKAndTopPCutAsTransformersDoes) {
  const std::vector<float> logits{std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  SamplingOptions o;
  o.temperature = 1.0;
  o.top_k = 2;
  Sampler top_k(o);
  EXPECT_EQ(histogram(top_k, logits, 2000)[0], 0);
  // top_p 0.75: 0.5 alone is short of it, 0.5 + 0.3 reaches it; the 0.2 token is cut.
  o.top_k = 0;
  o.top_p = 0.75;
  Sampler top_p(o);
  const auto counts = histogram(top_p, logits, 8000);
  EXPECT_EQ(counts[0], 0);
  EXPECT_NEAR(counts[1] / 8000.0, 0.5 / 0.8, 0.03);
  // A tiny top_p or top_k 1 is greedy.
  o.top_p = 1e-6;
  Sampler nearly_greedy(o);
  EXPECT_EQ(histogram(nearly_greedy, logits, 200)[1], 200);
}

TEST(Sampler, TheSeedFixesTheDraws) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  SamplingOptions o;
  o.temperature = 1.0;
  o.seed = 3;
  Sampler a(o), b(o);
  o.seed = 4;
  Sampler c(o);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 100; ++i) {
    da.push_back(a.next(logits.data(), 50));
    db.push_back(b.next(logits.data(), 50));
    dc.push_back(c.next(logits.data(), 50));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(Sampler, RefusesNonsense) {
  SamplingOptions o;
  o.temperature = -1.0;
  EXPECT_TRUE(test::throws_with([&] { Sampler s(o); }, {"temperature -1 is invalid (--temperature)"}));
  o = {};
  o.top_p = 1.5;
  EXPECT_TRUE(test::throws_with([&] { Sampler s(o); }, {"top_p 1.5 is invalid (--top-p)"}));
  o = {};
  o.top_k = -2;
  EXPECT_TRUE(test::throws_with([&] { Sampler s(o); }, {"top_k -2 is invalid (--top-k)"}));
}

TEST(GenerationDefaults, EosIdsAndSamplingFromTheModelDirectory) {
  test::ScratchDir dir("generation-defaults");
  const auto config_text = test::read_file(test::fixtures_dir() / "hf" / "llama3" / "config.json");
  std::ofstream(dir / "config.json") << config_text;
  const ModelConfig config = load_model_config(dir.path());

  // No generation_config.json: config.json's eos, greedy.
  GenerationDefaults d = load_generation_defaults(dir.path(), config);
  EXPECT_EQ(d.eos_ids, std::vector<int32_t>{2});
  EXPECT_EQ(d.sampling.temperature, 0.0);

  // A list of eos ids (Llama 3.1's end of turn and end of text) and sampling settings.
  std::ofstream(dir / "generation_config.json")
      << R"({"eos_token_id": [7, 2], "do_sample": true, "temperature": 0.6, "top_p": 0.9})";
  d = load_generation_defaults(dir.path(), config);
  EXPECT_EQ(d.eos_ids, (std::vector<int32_t>{7, 2}));
  EXPECT_DOUBLE_EQ(d.sampling.temperature, 0.6);
  EXPECT_DOUBLE_EQ(d.sampling.top_p, 0.9);
  EXPECT_EQ(d.sampling.top_k, 50);  // transformers' default

  // do_sample false: greedy, whatever temperature says.
  std::ofstream(dir / "generation_config.json")
      << R"({"eos_token_id": 5, "do_sample": false, "temperature": 0.6})";
  d = load_generation_defaults(dir.path(), config);
  EXPECT_EQ(d.eos_ids, std::vector<int32_t>{5});
  EXPECT_EQ(d.sampling.temperature, 0.0);

  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 1000})";
  EXPECT_TRUE(test::throws_with([&] { load_generation_defaults(dir.path(), config); },
                                {"generation_config.json", "eos_token_id 1000", "vocabulary of 96"}));
}

// generation_config.json's sampling values are checked where they are read, naming the file and
// the key: top_k 1e30 was cast to -2^63 and temperature -1 read as a --temperature never passed.
TEST(GenerationDefaults, SamplingValuesAreCheckedAsTheFileIsRead) {
  test::ScratchDir dir("generation-values");
  std::ofstream(dir / "config.json") << test::read_file(test::fixtures_dir() / "hf" / "llama3" /
                                                        "config.json");
  const ModelConfig config = load_model_config(dir.path());
  const auto defaults_of = [&](const std::string& json) {
    std::ofstream(dir / "generation_config.json") << json;
    return load_generation_defaults(dir.path(), config).sampling;
  };
  const auto refused = [&](const std::string& json, std::initializer_list<std::string> parts) {
    return test::throws_with([&] { defaults_of(json); }, parts);
  };
  EXPECT_TRUE(refused(R"({"do_sample": true, "top_k": 1e30})",
                      {"generation_config.json: top_k is 1e+30", "whole number of tokens"}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "top_k": 2.5})", {"generation_config.json: top_k is 2.5"}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "top_k": -1})", {"generation_config.json: top_k is -1"}));
  EXPECT_TRUE(
      refused(R"({"do_sample": true, "top_k": 18446744073709551615})", {"top_k is 18446744073709551615"}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "top_k": "40"})", {"generation_config.json: top_k is \"40\""}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "temperature": -1})",
                      {"generation_config.json: temperature is -1", "a number >= 0", "fix the file"}));
  EXPECT_FALSE(test::throws_with([&] { defaults_of(R"({"do_sample": true, "temperature": -1})"); },
                                 {"--temperature"}));
  EXPECT_TRUE(
      refused(R"({"do_sample": true, "top_p": 0})", {"generation_config.json: top_p is 0", "(0, 1]"}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "top_p": 1.5})", {"top_p is 1.5"}));
  EXPECT_TRUE(refused(R"({"do_sample": true, "temperature": "hot"})", {"temperature is \"hot\""}));

  // Whole numbers written as floats, and nulls (the default), are fine; without do_sample nothing
  // of it is read.
  SamplingOptions s = defaults_of(R"({"do_sample": true, "top_k": 40.0, "top_p": null, "temperature": 0})");
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.top_p, 1.0);
  EXPECT_EQ(s.temperature, 0.0);
  EXPECT_EQ(defaults_of(R"({"do_sample": true, "top_k": 4611686018427387904})").top_k, int64_t{1} << 62);
  s = defaults_of(R"({"do_sample": false, "top_k": 1e30, "temperature": -1})");
  EXPECT_EQ(s.temperature, 0.0);
}

TEST(TextStream, HoldsBackSplitCharactersAndJoinsUpToTheWholeReply) {
  const Tokenizer tokenizer = Tokenizer::from_json(test::tiny_tokenizer_json(false));
  const std::string text = "caf\xC3\xA9 \xE2\x9C\x93 the cat<|im_end|>";  // é and ✓ are 2 and 3 byte tokens
  const std::vector<int32_t> ids = tokenizer.encode(text, false);
  TextStream stream(tokenizer);
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_TRUE(is_valid_utf8(piece) && piece.find("\xEF\xBF\xBD") == std::string::npos)
        << "a piece ends inside a character";
    joined += piece;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, "caf\xC3\xA9 \xE2\x9C\x93 the cat");  // the special token is skipped
  EXPECT_EQ(joined, stream.text());
}

}  // namespace
}  // namespace ferry
