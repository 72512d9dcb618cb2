// One 4,096-token sequence against Hugging Face transformers (tests/fixtures/hf/long, written by
// tools/make_hf_goldens.py's `long` case): the logits at 32 positions spread over the sequence,
// the loss, every gradient and the first step's gradient norm, on the CPU backend untiled and over
// sequence tiles (model/decoder_layer.h) that do not divide the sequence. The tiled runs must give
// the untiled run's bits; all of them HF's values to the tolerances of engine_hf_golden_test.cpp.
// Attention in two groups of KV heads gives the same forward bits (loss, logits) and HF's
// gradients to the same tolerances.
//
// Until the fixture exists the test is skipped; it is made on the device machine with
// `OUT=/tmp/goldens bash tools/hf_goldens_device.sh` (or `python3 tools/make_hf_goldens.py DIR
// --case long`) and unpacked into tests/fixtures/hf.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/model_step.h"
#include "hf_golden.h"
#include "model/model_weights.h"
#include "test_util.h"

namespace ferry {
namespace {

using test::Golden;
using test::golden_batch;

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

struct LongRun {
  StepLoss loss;
  std::vector<std::vector<float>> grads;
  std::vector<float> logits_at;  // (positions, V)
};

LongRun run(const ModelWeights& w, const Golden& g, int64_t seq_tile, int64_t head_groups = 1) {
  ModelWeights weights = w;
  auto ops = make_cpu_ops();
  const StepBatch batch = golden_batch(g, 1);
  ModelStep step(weights.config, weights.layout, *ops, batch.chunk_tokens(), batch.chunks(), seq_tile,
                 head_groups);
  std::vector<float*> params;
  for (auto& u : weights.units) params.push_back(u.data());
  LongRun r;
  const int64_t V = weights.config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(g.seq * V));
  step.logits(params, batch.chunk(0), logits.data());
  for (int32_t p : g.i64("logit_positions"))
    r.logits_at.insert(r.logits_at.end(), logits.begin() + p * V, logits.begin() + (p + 1) * V);
  for (const auto& u : weights.layout.units) r.grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<float*> grad_ptrs;
  for (auto& u : r.grads) grad_ptrs.push_back(u.data());
  r.loss = step.run(params, grad_ptrs, batch);
  return r;
}

// The run's logits, loss, gradients and gradient norm against transformers'.
void expect_hf_values(const ModelWeights& w, const Golden& g, const LongRun& r) {
  const auto expected_logits = g.f32("logits_at");
  EXPECT_TRUE(
      test::all_close(r.logits_at, expected_logits, 1e-5, 1e-5 * max_abs(expected_logits), "logits_at"));
  EXPECT_NEAR(r.loss.mean(), g.f32("loss")[0], 1e-5 * g.f32("loss")[0]);
  double sumsq = 0.0;
  for (size_t u = 0; u < w.layout.units.size(); ++u) {
    for (const auto& p : w.layout.units[u].params) {
      const auto expected = g.f32("grad." + p.hf_name);
      const std::vector<float> actual(r.grads[u].begin() + p.offset, r.grads[u].begin() + p.offset + p.numel);
      for (float x : actual) sumsq += static_cast<double>(x) * x;
      EXPECT_TRUE(test::all_close(actual, expected, 1e-4, 1e-4 * max_abs(expected), "grad." + p.hf_name));
    }
  }
  const float golden_norm = g.f32("grad_norm")[0];
  EXPECT_NEAR(std::sqrt(sumsq), golden_norm, 1e-5 * golden_norm);
}

TEST(HfLongGolden, FourThousandTokensUntiledAndTiled) {
  const auto dir = test::fixtures_dir() / "hf" / "long";
  if (!std::filesystem::exists(dir / "golden.safetensors"))
    GTEST_SKIP() << "no fixture at " << dir << "; make it with tools/make_hf_goldens.py --case long";
  const ModelWeights w = load_model_weights(dir);
  const Golden g(dir);
  ASSERT_EQ(g.batch, 1);
  ASSERT_EQ(g.seq, 4096);

  const LongRun untiled = run(w, g, 0);
  expect_hf_values(w, g, untiled);

  for (int64_t tile : {int64_t{1000}, int64_t{4095}, int64_t{333}}) {
    SCOPED_TRACE("seq_tile " + std::to_string(tile));
    const LongRun tiled = run(w, g, tile);
    EXPECT_EQ(tiled.loss.loss_sum, untiled.loss.loss_sum);
    EXPECT_EQ(0, std::memcmp(tiled.logits_at.data(), untiled.logits_at.data(), untiled.logits_at.size() * 4));
    for (size_t u = 0; u < untiled.grads.size(); ++u)
      EXPECT_EQ(0, std::memcmp(tiled.grads[u].data(), untiled.grads[u].data(), untiled.grads[u].size() * 4))
          << "unit " << u;
  }
}

TEST(HfLongGolden, FourThousandTokensInTwoHeadGroups) {
  const auto dir = test::fixtures_dir() / "hf" / "long";
  if (!std::filesystem::exists(dir / "golden.safetensors"))
    GTEST_SKIP() << "no fixture at " << dir << "; make it with tools/make_hf_goldens.py --case long";
  const ModelWeights w = load_model_weights(dir);
  const Golden g(dir);
  ASSERT_EQ(w.config.num_kv_heads % 2, 0);
  const LongRun one = run(w, g, 0);
  for (int64_t tile : {int64_t{0}, int64_t{1000}}) {
    SCOPED_TRACE("seq_tile " + std::to_string(tile));
    const LongRun grouped = run(w, g, tile, 2);
    EXPECT_EQ(grouped.loss.loss_sum, one.loss.loss_sum);
    EXPECT_EQ(0, std::memcmp(grouped.logits_at.data(), one.logits_at.data(), one.logits_at.size() * 4));
    expect_hf_values(w, g, grouped);
  }
}

}  // namespace
}  // namespace ferry
