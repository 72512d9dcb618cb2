// The KV-cache forward (generate/cached_decoder.h) on the CPU: its logits equal a full forward's
// over the same tokens (tests/generate_full_forward.h) to fp32 rounding, however the tokens are fed
// (all at once, one at a time, in chunks across the prefill's chunk size, after a truncation), and
// match Hugging Face transformers' goldens as tightly as the training forward does.
#include <algorithm>
#include <cmath>
#include <random>

#include "device/device.h"
#include "generate/cached_decoder.h"
#include "generate/resident_model.h"
#include "generate_full_forward.h"
#include "hf_golden.h"
#include "model/model_weights.h"
#include "ops/device_ops.h"
#include "test_util.h"

namespace ferry {
namespace {

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// A CPU device and ops holding `w` whole, as `ferry generate --device cpu` does.
struct CpuRig {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<ResidentModel> model;

  explicit CpuRig(const ModelWeights& w) {
    SimDeviceOptions options;
    options.require_pinned_host = false;
    device = make_sim_device(options);
    ops = make_device_ops(*device);
    model = std::make_unique<ResidentModel>(*device, w.config, DType::F32, [&](size_t u, float* dst) {
      std::copy(w.units[u].begin(), w.units[u].end(), dst);
    });
  }
};

std::vector<float> rows_of(const std::vector<float>& logits, int64_t first, int64_t count, int64_t V) {
  return std::vector<float>(logits.begin() + first * V, logits.begin() + (first + count) * V);
}

class CachedDecoderGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CachedDecoderGolden, MatchesFullForwardAndTransformers) {
  const auto dir = test::fixtures_dir() / "hf" / GetParam();
  const ModelWeights w = load_model_weights(dir);
  const test::Golden g(dir);
  const auto ids = g.i64("input_ids"), positions = g.i64("position_ids");
  const auto golden = g.f32("logits");
  const int64_t V = w.config.vocab_size, S = g.seq;
  CpuRig rig(w);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, S);

  for (int64_t r = 0; r < g.batch; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    for (int64_t t = 0; t < S; ++t)
      ASSERT_EQ(positions[static_cast<size_t>(r * S + t)], t) << "one sequence a row";
    const std::vector<int32_t> row(ids.begin() + r * S, ids.begin() + (r + 1) * S);
    const std::vector<float> expected = rows_of(golden, r * S, S, V);
    const std::vector<float> reference = test::full_forward_logits(w, row);
    EXPECT_TRUE(test::all_close(reference, expected, 1e-5, 1e-5 * max_abs(expected), "full forward vs HF"));

    // All at once (one prefill).
    decoder.truncate(0);
    const std::vector<float> prefill = decoder.feed_all_logits(row);
    EXPECT_TRUE(
        test::all_close(prefill, reference, 1e-5, 1e-6 * max_abs(reference), "prefill vs full forward"));
    EXPECT_TRUE(test::all_close(prefill, expected, 1e-5, 1e-5 * max_abs(expected), "prefill vs HF"));

    // A prompt of 5, then one token at a time (decode), through feed's last-row logits.
    decoder.truncate(0);
    std::vector<float> stepped = rows_of(decoder.feed_all_logits(std::span(row).first(5)), 0, 5, V);
    for (int64_t t = 5; t < S; ++t) {
      const std::vector<float>& last = decoder.feed(std::span(row).subspan(static_cast<size_t>(t), 1));
      stepped.insert(stepped.end(), last.begin(), last.end());
    }
    EXPECT_EQ(decoder.length(), S);
    EXPECT_TRUE(
        test::all_close(stepped, reference, 1e-5, 1e-6 * max_abs(reference), "decode vs full forward"));
    EXPECT_TRUE(test::all_close(stepped, expected, 1e-5, 1e-5 * max_abs(expected), "decode vs HF"));

    // Cut back to 9 tokens and continue: the later logits are the same again.
    decoder.truncate(9);
    const std::vector<float> again = decoder.feed_all_logits(std::span(row).subspan(9));
    EXPECT_TRUE(test::all_close(again, rows_of(reference, 9, S - 9, V), 1e-5, 1e-6 * max_abs(reference),
                                "after truncate"));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CachedDecoderGolden,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "tied"));

// A prompt longer than the prefill chunk (CachedDecoder::kChunkTokens) is fed in chunks whose
// queries attend to the earlier chunks' cache; a qk-norm, GQA model with random weights.
TEST(CachedDecoder, PrefillAcrossChunksMatchesFullForward) {
  const auto dir = test::fixtures_dir() / "hf" / "qwen3";
  ModelWeights loaded = load_model_weights(dir);
  nlohmann::json json = loaded.config.raw;
  json["max_position_embeddings"] = 1024;
  ModelWeights w = ModelWeights::zeros(parse_model_config(json, "test"));
  for (size_t u = 0; u < w.units.size(); ++u) w.units[u] = loaded.units[u];
  const int64_t T = CachedDecoder::kChunkTokens * 2 + 37, V = w.config.vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(T));
  std::mt19937 rng(7);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % V);
  const std::vector<float> reference = test::full_forward_logits(w, ids);

  CpuRig rig(w);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, T + 1);
  const std::vector<float> all = decoder.feed_all_logits(ids);
  EXPECT_TRUE(test::all_close(all, reference, 1e-4, 1e-5 * max_abs(reference), "chunked prefill"));
  // feed() of the same prompt returns the last row.
  decoder.truncate(0);
  const std::vector<float>& last = decoder.feed(ids);
  EXPECT_TRUE(
      test::all_close(last, rows_of(reference, T - 1, 1, V), 1e-4, 1e-5 * max_abs(reference), "last row"));
}

TEST(CachedDecoder, RefusesWhatTheContextCannotHold) {
  const ModelWeights w = load_model_weights(test::fixtures_dir() / "hf" / "llama3");
  CpuRig rig(w);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, 4);
  const std::vector<int32_t> five{1, 2, 3, 4, 5};
  EXPECT_TRUE(test::throws_with([&] { decoder.feed(five); }, {"do not fit the context of 4", "--context"}));
  const std::vector<int32_t> bad{1, 96};
  EXPECT_TRUE(test::throws_with([&] { decoder.feed(bad); }, {"token id 96", "vocabulary of 96"}));
  EXPECT_TRUE(test::throws_with([&] { CachedDecoder(*rig.model, *rig.device, *rig.ops, 257); },
                                {"257", "max_position_embeddings"}));
}

}  // namespace
}  // namespace ferry
