// q, k and v as one product (model/decoder_layer.h, one_qkv_product) against three products, on
// the CPU reference. The same layer's weights run once from the unit's buffer, where q_proj, k_proj
// and v_proj lie one after another (one product, RoPE by Ops::rope_qkv), and once copied apart
// (three products, RoPE by Ops::rope). Every output element of a CPU product is its own sum in a
// fixed order (ops/cpu/ordered_gemm.h), so the layer's output, its attention inputs and every
// parameter gradient but the input norm's are the same bits; d/dh sums the three projections'
// columns in one sum instead of three, so dx and the input norm's weight gradient agree to fp32's
// rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/arena.h"
#include "model/decoder_layer.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "model/unit_params.h"
#include "ops/ops.h"
#include "train/model_init.h"

namespace ferry {
namespace {

// Llama's tiny preset with 8 query heads over 2 KV heads of 16 and the MLP `intermediate` wide: a
// row of q, k, v side by side is 192 values, which the activation's rows hold (intermediate
// >= 192) or not (their own scratch).
ModelConfig tiny_config(int64_t intermediate) {
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["num_attention_heads"] = 8;
  json["num_key_value_heads"] = 2;
  json["head_dim"] = 16;
  json["num_hidden_layers"] = 1;
  json["intermediate_size"] = intermediate;
  return parse_model_config(json, "test");
}

std::vector<float> random_values(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// q_proj, k_proj, v_proj of `p` moved into `apart`, with a gap after each, so that no two are
// adjacent: the layer runs three products on them.
void move_qkv_apart(LayerParams& p, std::vector<float>& apart) {
  const int64_t gap = 16;
  apart.assign(static_cast<size_t>(p.q_proj.numel() + p.k_proj.numel() + p.v_proj.numel() + 3 * gap), 0.0f);
  float* at = apart.data();
  for (Tensor* w : {&p.q_proj, &p.k_proj, &p.v_proj}) {
    std::memcpy(at, w->data, w->bytes());
    *w = Tensor(at, DType::F32, {w->shape[0], w->shape[1]});
    at += w->numel() + gap;
  }
}

struct LayerRun {
  std::vector<float> x_out, q, k, v, dx_in;
  std::vector<float> grads;                   // the unit's gradient buffer
  std::vector<float> q_grad, k_grad, v_grad;  // q_proj's, k_proj's, v_proj's gradient
};

std::vector<float> values_of(const Tensor& t) {
  const float* p = t.f32();
  return std::vector<float>(p, p + t.numel());
}

// One forward and backward of the layer on two documents of 23 and 17 tokens.
LayerRun run_layer(const ModelConfig& c, std::vector<float> weights, bool apart) {
  const ModelLayout layout = build_model_layout(c);
  const UnitLayout& unit = layout.units[layout.layer_unit(0)];
  const int64_t T = 40, H = c.hidden_size;
  std::vector<float> grads(static_cast<size_t>(unit.numel), 0.0f);
  LayerParams p = layer_params(unit, weights.data(), DType::F32);
  LayerParams g = layer_params(unit, grads.data(), DType::F32);
  std::vector<float> weights_apart, grads_apart;
  if (apart) {
    move_qkv_apart(p, weights_apart);
    move_qkv_apart(g, grads_apart);
  }
  EXPECT_EQ(one_qkv_product(c, p, 1, &g), !apart);

  std::vector<int32_t> positions(T), doc_start(T);
  for (int64_t t = 0; t < T; ++t) {
    doc_start[t] = t < 23 ? 0 : 23;
    positions[t] = static_cast<int32_t>(t - doc_start[t]);
  }
  TokenChunk chunk;
  chunk.tokens = T;
  chunk.positions = positions.data();
  chunk.doc_start = doc_start.data();

  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, c, T, DType::F32, true);
  std::vector<char> memory(measure.used() + Arena::kAlignment);
  Arena arena(memory.data(), memory.size());
  LayerScratch s = carve_layer_scratch(arena, c, T, DType::F32, true);
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const LayerContext ctx{&c, inv_freq.data()};
  auto ops = make_cpu_ops();

  std::vector<float> x_in = random_values(static_cast<size_t>(T * H), 3, 1.0f);
  std::vector<float> dx_out = random_values(static_cast<size_t>(T * H), 4, 1.0f);
  LayerRun r;
  r.x_out.assign(static_cast<size_t>(T * H), 0.0f);
  layer_forward(*ops, ctx, p, chunk, Tensor::f32(x_in.data(), {T, H}), Tensor::f32(r.x_out.data(), {T, H}),
                s);
  r.q = values_of(s.q), r.k = values_of(s.k), r.v = values_of(s.v);
  r.dx_in.assign(static_cast<size_t>(T * H), 0.0f);
  layer_backward(*ops, ctx, p, g, chunk, Tensor::f32(x_in.data(), {T, H}), Tensor::f32(dx_out.data(), {T, H}),
                 Tensor::f32(r.dx_in.data(), {T, H}), s);
  r.q_grad = values_of(g.q_proj), r.k_grad = values_of(g.k_proj), r.v_grad = values_of(g.v_proj);
  r.grads = std::move(grads);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every element within fp32's rounding of the largest, and the two not all zero.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double largest = 0.0, worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(a[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  ASSERT_GT(largest, 0.0) << what << ": all zero tests nothing";
  EXPECT_LE(worst, 1e-5 * largest) << what;
}

class QkvProduct : public ::testing::TestWithParam<int64_t> {};

TEST_P(QkvProduct, GivesTheThreeProductsBitsButWhereItSumsThemInOne) {
  const ModelConfig c = tiny_config(GetParam());
  const ModelLayout layout = build_model_layout(c);
  std::vector<std::vector<float>> units;
  init_random_weights(c, 7, units);
  const size_t u = layout.layer_unit(0);
  const LayerRun one = run_layer(c, units[u], false);
  const LayerRun three = run_layer(c, units[u], true);

  EXPECT_TRUE(same_bits(one.x_out, three.x_out)) << "the layer's output";
  EXPECT_TRUE(same_bits(one.q, three.q)) << "q after RoPE";
  EXPECT_TRUE(same_bits(one.k, three.k)) << "k after RoPE";
  EXPECT_TRUE(same_bits(one.v, three.v)) << "v";
  EXPECT_TRUE(same_bits(one.q_grad, three.q_grad)) << "q_proj's gradient";
  EXPECT_TRUE(same_bits(one.k_grad, three.k_grad)) << "k_proj's gradient";
  EXPECT_TRUE(same_bits(one.v_grad, three.v_grad)) << "v_proj's gradient";
  const UnitLayout& unit = layout.units[u];
  for (const ParamSlot& p : unit.params) {
    const auto part = [&](const LayerRun& r) {
      return std::vector<float>(r.grads.begin() + p.offset, r.grads.begin() + p.offset + p.numel);
    };
    if (p.name == "input_layernorm.weight")
      expect_close(part(one), part(three), "the input norm's gradient");
    else if (p.name.find("self_attn.q_proj") == std::string::npos &&
             p.name.find("self_attn.k_proj") == std::string::npos &&
             p.name.find("self_attn.v_proj") == std::string::npos)
      EXPECT_TRUE(same_bits(part(one), part(three))) << p.name;
  }
  expect_close(one.dx_in, three.dx_in, "dx");
}

INSTANTIATE_TEST_SUITE_P(MlpWidths, QkvProduct, ::testing::Values(256, 96),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param >= 192 ? "InTheActivationsMemory" : "InItsOwnScratch";
                         });

TEST(QkvProduct, NotWithHeadGroupsNormsOrBiases) {
  const ModelConfig c = tiny_config(160);
  const ModelLayout layout = build_model_layout(c);
  std::vector<std::vector<float>> units;
  init_random_weights(c, 7, units);
  const UnitLayout& unit = layout.units[layout.layer_unit(0)];
  const LayerParams p = layer_params(unit, units[layout.layer_unit(0)].data(), DType::F32);
  EXPECT_TRUE(one_qkv_product(c, p, 1));
  EXPECT_FALSE(one_qkv_product(c, p, 2)) << "two groups of heads";
  ModelConfig with_norms = c;
  with_norms.qk_norm = true;
  EXPECT_FALSE(one_qkv_product(with_norms, p, 1)) << "q/k norms";
  LayerParams with_bias = p;
  with_bias.k_bias = with_bias.input_norm;
  EXPECT_FALSE(one_qkv_product(c, with_bias, 1)) << "a k_proj bias";
}

}  // namespace
}  // namespace ferry
