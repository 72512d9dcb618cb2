#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "model/model_config.h"
#include "published_configs.h"
#include "test_util.h"

namespace ferry {
namespace {

using nlohmann::json;

using namespace test::published_configs;
using test::throws_with;

ModelConfig parse(const char* text) {
  return parse_model_config(json::parse(text), "config.json");
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.architecture_name, b.architecture_name);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.o_bias, b.o_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
}

TEST(ModelConfig, Llama31_8B) {
  const ModelConfig c = parse(kLlama31_8B);
  EXPECT_EQ(c.arch, Architecture::Llama);
  EXPECT_EQ(c.architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.raw["transformers_version"], "4.43.0.dev0");
}

TEST(ModelConfig, Mistral7B) {
  const ModelConfig c = parse(kMistral7B_v01);
  EXPECT_EQ(c.arch, Architecture::Mistral);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.sliding_window, std::optional<int64_t>(4096));
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm);

  // v0.2 and later: no window.
  json j = json::parse(kMistral7B_v01);
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(parse_model_config(j, "config.json").sliding_window.has_value());
}

TEST(ModelConfig, Qwen25_7B) {
  const ModelConfig c = parse(kQwen25_7B);
  EXPECT_EQ(c.arch, Architecture::Qwen2);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.num_heads, 28);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  // sliding_window is set but use_sliding_window is false: no window.
  EXPECT_FALSE(c.sliding_window.has_value());
}

TEST(ModelConfig, Qwen3_8B) {
  const ModelConfig c = parse(kQwen3_8B);
  EXPECT_EQ(c.arch, Architecture::Qwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.rope_theta, 1e6);  // an integer in the file
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.max_position_embeddings, 40960);

  // Qwen3's head_dim is explicit and need not be hidden / heads.
  json j = json::parse(kQwen3_8B);
  j["hidden_size"] = 2560;  // Qwen3-4B: 32 heads of 128 over a 2560-wide residual
  EXPECT_EQ(parse_model_config(j, "config.json").q_dim(), 4096);
}

TEST(ModelConfig, TiedEmbeddingsAndExplicitHeadDim) {
  const ModelConfig c = parse(kLlama32_1B);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
}

TEST(ModelConfig, RopeParametersMatchLegacyKeys) {
  const ModelConfig v5 = parse(kLlama31_8B_v5);
  const ModelConfig v4 = parse(kLlama31_8B);
  expect_same(v5, v4);
  EXPECT_EQ(rope_inv_freq(v5), rope_inv_freq(v4));

  // Default rope in rope_parameters; rope_theta taken from inside it.
  json j = json::parse(kQwen3_8B);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
}

TEST(ModelConfig, AsTransformers5SavesIt) {
  const ModelConfig c = parse(kTransformers5Saved);
  EXPECT_EQ(c.arch, Architecture::Llama);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Llama3);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(model_config_to_json(c)["pad_token_id"], nullptr);
}

TEST(ModelConfig, Defaults) {
  // The minimum: transformers' defaults fill the rest.
  const ModelConfig c = parse(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
                                  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4})");
  EXPECT_EQ(c.arch, Architecture::Llama);
  EXPECT_EQ(c.architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(c.initializer_range, 0.02);
}

TEST(ModelConfig, QwenSlidingWindow) {
  json j = json::parse(kQwen25_7B);
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 0;  // every layer slides
  EXPECT_EQ(parse_model_config(j, "config.json").sliding_window, std::optional<int64_t>(4096));
  j["max_window_layers"] = 28;  // no layer slides
  EXPECT_FALSE(parse_model_config(j, "config.json").sliding_window.has_value());
  j["max_window_layers"] = 20;  // layers 20.. slide, the others do not
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); }, {"8 of 28 layers use a window"}));
  j.erase("max_window_layers");
  j["layer_types"] = std::vector<std::string>(28, "sliding_attention");
  EXPECT_EQ(parse_model_config(j, "config.json").sliding_window, std::optional<int64_t>(4096));
  // transformers: an explicit null window means none, an absent one Qwen2Config's 4096.
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(parse_model_config(j, "config.json").sliding_window.has_value());
  j.erase("sliding_window");
  EXPECT_EQ(parse_model_config(j, "config.json").sliding_window, std::optional<int64_t>(4096));
}

TEST(ModelConfig, JsonRoundTrip) {
  for (const char* text : {kLlama31_8B, kMistral7B_v01, kQwen25_7B, kQwen3_8B, kLlama32_1B, kLlama31_8B_v5,
                           kTransformers5Saved}) {
    const ModelConfig c = parse(text);
    const json out = model_config_to_json(c);
    SCOPED_TRACE(out.dump());
    expect_same(parse_model_config(out, "written"), c);
    EXPECT_EQ(out["hidden_act"], "silu");
    EXPECT_EQ(out["torch_dtype"], "bfloat16");
    EXPECT_EQ(out["bos_token_id"], c.raw["bos_token_id"]);
  }
  // Features beyond the released configs.
  ModelConfig c = parse(kLlama31_8B);
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.dtype = DType::F16;
  expect_same(parse_model_config(model_config_to_json(c), "written"), c);
  ModelConfig q = parse(kQwen25_7B);
  q.sliding_window = 4096;
  q.tie_word_embeddings = true;
  expect_same(parse_model_config(model_config_to_json(q), "written"), q);
  ModelConfig q3 = parse(kQwen3_8B);
  q3.sliding_window = 1024;
  q3.qkv_bias = q3.o_bias = true;
  expect_same(parse_model_config(model_config_to_json(q3), "written"), q3);
  // What the architecture cannot express is refused.
  ModelConfig m = parse(kMistral7B_v01);
  m.qkv_bias = true;
  EXPECT_TRUE(throws_with([&] { model_config_to_json(m); }, {"MistralForCausalLM has no biases"}));
}

TEST(ModelConfig, LoadFromDirectory) {
  test::ScratchDir dir("config");
  EXPECT_TRUE(throws_with([&] { load_model_config(dir.path()); }, {"config.json", "cannot open"}));
  {
    std::ofstream out(dir / "config.json");
    out << kQwen3_8B;
  }
  EXPECT_EQ(load_model_config(dir.path()).arch, Architecture::Qwen3);
  {
    std::ofstream out(dir / "config.json");
    out << "{\"architectures\": [";
  }
  EXPECT_TRUE(throws_with([&] { load_model_config(dir.path()); }, {"config.json", "not valid JSON"}));
}

// inv_freq recomputed independently, in double precision, from the llama3 recipe.
std::vector<double> llama3_inv_freq_reference(double theta, int dim, double factor, double low, double high,
                                              double old_context) {
  std::vector<double> out;
  for (int i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(i) / dim);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < old_context / high) {
      out.push_back(freq);  // high frequencies: unchanged
    } else if (wavelen > old_context / low) {
      out.push_back(freq / factor);  // low frequencies: interpolated by the factor
    } else {
      const double smooth = (old_context / wavelen - low) / (high - low);
      out.push_back((1 - smooth) * freq / factor + smooth * freq);
    }
  }
  return out;
}

TEST(RopeInvFreq, Llama31ScalingMatchesDoublePrecisionReference) {
  const ModelConfig c = parse(kLlama31_8B);
  const std::vector<float> got = rope_inv_freq(c);
  const std::vector<double> want = llama3_inv_freq_reference(500000.0, 128, 8.0, 1.0, 4.0, 8192.0);
  ASSERT_EQ(got.size(), 64u);
  ASSERT_EQ(want.size(), 64u);
  int unchanged = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << i;
    const double plain = 1.0 / std::pow(500000.0, 2.0 * i / 128);
    if (std::fabs(want[i] - plain) < 1e-12 * plain)
      ++unchanged;
    else if (std::fabs(want[i] - plain / 8) < 1e-12 * plain)
      ++divided;
    else
      ++smoothed;
  }
  // All three regimes are exercised.
  EXPECT_GT(unchanged, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  EXPECT_EQ(got[0], 1.0f);
}

// inv_freq of Llama-3.1-8B as transformers 5.17.0 / torch 2.11 compute it on the CPU
// (LlamaRotaryEmbedding(config).inv_freq), as fp32 bit patterns: ferry must match bit for bit.
TEST(RopeInvFreq, Llama31MatchesTransformersBitForBit) {
  const uint32_t golden[64] = {
      0x3f800000, 0x3f508ac1, 0x3f29e1c6, 0x3f0a6384, 0x3ee177bc, 0x3eb7ab7d, 0x3e959ee3, 0x3e73c461,
      0x3e4693b0, 0x3e21c3a0, 0x3e03c6a0, 0x3dd6b19c, 0x3daee4ad, 0x3d8e7898, 0x3d681e67, 0x3d3d1684,
      0x3d1a08c8, 0x3cfaf53f, 0x3ccc6f49, 0x3ca68939, 0x3c87a9c3, 0x3c5d06ec, 0x3c340d6d, 0x3c12ac7f,
      0x3beef74f, 0x3bc2aa76, 0x3b9e9402, 0x3b812e35, 0x3b527720, 0x3b0dfd06, 0x3ab3d11d, 0x3a60979e,
      0x3a0995d2, 0x39a3f108, 0x393b2dd2, 0x38c86886, 0x38a3418d, 0x3884fdbf, 0x3858ac81, 0x38308199,
      0x380fc8f8, 0x37ea426f, 0x37bed4f4, 0x379b7475, 0x377d45c3, 0x374e51f5, 0x3728126b, 0x3708ea0f,
      0x36df10c4, 0x36b5b687, 0x369406cb, 0x36712b80, 0x36447610, 0x36200a69, 0x36025f34, 0x35d46808,
      0x35ad07a7, 0x358cf400, 0x3565a54d, 0x353b12c7, 0x351864a7, 0x34f848c2, 0x34ca41b0, 0x34a4c2ff};
  const std::vector<float> got = rope_inv_freq(parse(kLlama31_8B));
  ASSERT_EQ(got.size(), 64u);
  for (size_t i = 0; i < 64; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &got[i], 4);
    EXPECT_EQ(bits, golden[i]) << i;
  }
}

TEST(RopeInvFreq, DefaultRope) {
  const ModelConfig c = parse(kQwen3_8B);
  const std::vector<float> got = rope_inv_freq(c);
  ASSERT_EQ(got.size(), 64u);
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = 1.0 / std::pow(1e6, 2.0 * i / 128);
    EXPECT_NEAR(got[i], want, 1e-6 * want) << i;
  }
}

// YaRN written out from its definition (transformers' _compute_yarn_parameters) in float64.
std::vector<double> yarn_inv_freq_reference(double base, int dim, double factor, double original) {
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(32)), 0.0);
  const double high = std::min(std::ceil(correction_dim(1)), static_cast<double>(dim - 1));
  std::vector<double> out;
  for (int i = 0; i < dim / 2; ++i) {
    const double plain = 1.0 / std::pow(base, 2.0 * i / dim);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    out.push_back(plain / factor * ramp + plain * (1 - ramp));
  }
  return out;
}

// Qwen2.5's documented long-context setting: rope_scaling {"type": "yarn", "factor": 4,
// "original_max_position_embeddings": 32768} on a model whose max_position_embeddings is 32768.
TEST(RopeInvFreq, YarnBlendsInterpolatedAndKeptFrequenciesAndRaisesTheTemperature) {
  json j = json::parse(kQwen25_7B);
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_FLOAT_EQ(attention_scale(c),
                  static_cast<float>(std::pow(0.1 * std::log(4.0) + 1.0, 2) / std::sqrt(128.0)));
  const std::vector<float> got = rope_inv_freq(c);
  const std::vector<double> want = yarn_inv_freq_reference(c.rope_theta, 128, 4.0, 32768);
  ASSERT_EQ(got.size(), want.size());
  int kept = 0, interpolated = 0, blended = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << i;
    const double plain = 1.0 / std::pow(c.rope_theta, 2.0 * i / 128);
    if (std::fabs(want[i] - plain) < 1e-12 * plain)
      ++kept;
    else if (std::fabs(want[i] - plain / 4) < 1e-12 * plain)
      ++interpolated;
    else
      ++blended;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(interpolated, 0);
  EXPECT_GT(blended, 0);
  // Without YaRN the scale is the plain one, bit for bit.
  EXPECT_EQ(attention_scale(parse(kQwen25_7B)), 1.0f / std::sqrt(128.0f));
  // An explicit attention_factor wins; an unknown rope type is still refused.
  j["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_DOUBLE_EQ(parse_model_config(j, "config.json").rope_scaling.attention_factor, 1.5);
  j["rope_scaling"] = {{"type", "longrope"}, {"factor", 4.0}};
  EXPECT_THROW(parse_model_config(j, "config.json"), Error);
}

// ---- errors ----

json with(const char* text, const char* key, const json& value) {
  json j = json::parse(text);
  j[key] = value;
  return j;
}

TEST(ModelConfigErrors, UnknownArchitecture) {
  EXPECT_TRUE(throws_with(
      [&] { parse_model_config(with(kLlama31_8B, "architectures", {"GPT2LMHeadModel"}), "config.json"); },
      {"[config] config.json: architecture 'GPT2LMHeadModel' is not supported; ferry trains "
       "LlamaForCausalLM, "
       "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"}));
  json j = json::parse(kLlama31_8B);
  j.erase("architectures");
  j["model_type"] = "gemma";
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(j, "config.json"); }, {"model_type 'gemma' is not supported"}));
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(with(kLlama31_8B, "model_type", "mistral"), "config.json"); },
                  {"does not match model_type 'mistral'"}));
}

TEST(ModelConfigErrors, MissingKeyAndWrongTypes) {
  json j = json::parse(kMistral7B_v01);
  j.erase("hidden_size");
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); },
                          {"config.json", "missing required key 'hidden_size'"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kMistral7B_v01, "num_hidden_layers", "32"), "c"); },
                          {"key 'num_hidden_layers' must be an integer", "\"32\" (string)"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kMistral7B_v01, "vocab_size", 320.5), "c"); },
                          {"key 'vocab_size' must be an integer"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kMistral7B_v01, "tie_word_embeddings", 1), "c"); },
                          {"key 'tie_word_embeddings' must be true or false"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kMistral7B_v01, "rms_norm_eps", "1e-5"), "c"); },
                          {"key 'rms_norm_eps' must be a number"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kMistral7B_v01, "torch_dtype", "int8"), "c"); },
                          {"torch_dtype 'int8' is not supported"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(json::array(), "c"); }, {"must be a JSON object"}));
  json r = json::parse(kLlama31_8B);
  r["rope_scaling"].erase("low_freq_factor");
  EXPECT_TRUE(throws_with([&] { parse_model_config(r, "c"); },
                          {"missing required key 'rope_scaling.low_freq_factor'"}));
}

TEST(ModelConfigErrors, UnsupportedRope) {
  json j = json::parse(kQwen25_7B);
  j["rope_scaling"] = {{"factor", 4.0}, {"original_max_position_embeddings", 32768}, {"type", "longrope"}};
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); },
                          {"rope type 'longrope' (in rope_scaling) is not supported"}));
  j["rope_scaling"] = {{"factor", 2.0}, {"rope_type", "dynamic"}};
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); }, {"rope type 'dynamic'"}));
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}};
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); },
                          {"rope type 'linear' (in rope_parameters) is not supported"}));
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  EXPECT_TRUE(throws_with([&] { parse_model_config(j, "config.json"); }, {"partial_rotary_factor 0.5"}));
}

TEST(ModelConfigErrors, YarnTruncateMustBeABoolean) {
  json j = json::parse(kQwen25_7B);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2}, {"truncate", "yes"}};
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(j, "config.json"); },
                  {"config.json", "key 'rope_scaling.truncate' must be true or false", "\"yes\" (string)"}));
  j["rope_scaling"]["truncate"] = false;
  EXPECT_FALSE(parse_model_config(j, "config.json").rope_scaling.truncate);
  j["rope_scaling"]["truncate"] = nullptr;  // transformers' default
  EXPECT_TRUE(parse_model_config(j, "config.json").rope_scaling.truncate);
}

TEST(ModelConfigErrors, HeadsThatDoNotDivide) {
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(with(kMistral7B_v01, "hidden_size", 4100), "config.json"); },
                  {"hidden_size (4100) is not a multiple of num_attention_heads (32)"}));
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(with(kMistral7B_v01, "num_key_value_heads", 5), "config.json"); },
                  {"num_attention_heads (32) is not a multiple of num_key_value_heads (5)"}));
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(with(kMistral7B_v01, "num_key_value_heads", 0), "config.json"); },
                  {"'num_key_value_heads' must be positive"}));
}

TEST(ModelConfigErrors, KeysThatChangeTheMath) {
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kLlama31_8B, "hidden_act", "gelu"), "c"); },
                          {"hidden_act 'gelu' is not supported"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kLlama31_8B, "pretraining_tp", 2), "c"); },
                          {"pretraining_tp 2"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kLlama31_8B, "attn_logit_softcapping", 50.0), "c"); },
                          {"'attn_logit_softcapping' is set"}));
  EXPECT_TRUE(throws_with([&] { parse_model_config(with(kLlama31_8B, "attention_dropout", 0.1), "c"); },
                          {"attention_dropout 0.1"}));
  EXPECT_TRUE(
      throws_with([&] { parse_model_config(with(kQwen25_7B, "use_mrope", true), "c"); }, {"use_mrope"}));
  // A null means "the default" in transformers: accepted.
  EXPECT_NO_THROW(parse_model_config(with(kLlama31_8B, "attn_logit_softcapping", nullptr), "c"));
}

}  // namespace
}  // namespace ferry
