// Generation on the GPU (bf16 weights and KV cache, the CUDA ops): the cached decoder's logits
// track transformers' float64 goldens, a prompt fed token by token gives the logits of one
// prefill, greedy decoding on the GPU agrees with the CPU's while their logits are far from a tie,
// and a model too large for the GPU is refused before anything is uploaded.
//
// Tolerance: every GEMM input is rounded to bf16 (u = 2^-8) and the two layers add their shares;
// logits of these 2-layer models stay within a relative RMS error of 2% of the goldens, and each
// within 8% of the largest (a wrong mask, rotation or scale moves them by far more).
#include <cmath>
#include <fstream>

#include "device/device.h"
#include "generate/generation_model.h"
#include "generate/generator.h"
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

::testing::AssertionResult tracks(const std::vector<float>& got, const std::vector<float>& ref,
                                  const char* what) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double err2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << what << ": non-finite at " << i;
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    err2 += e * e;
    ref2 += static_cast<double>(ref[i]) * ref[i];
    worst = std::max(worst, e);
  }
  const double rms = std::sqrt(err2 / std::max(ref2, 1e-30)), limit = 0.08 * max_abs(ref);
  if (rms <= 0.02 && worst <= limit) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative rms " << rms << " (limit 0.02), worst " << worst
                                       << " (limit " << limit << ")";
}

struct GpuRig {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<ResidentModel> model;

  explicit GpuRig(const ModelWeights& w) {
    device = make_cuda_device(0, 0);
    ops = make_device_ops(*device);
    model = std::make_unique<ResidentModel>(*device, w.config, DType::BF16, [&](size_t u, float* dst) {
      std::copy(w.units[u].begin(), w.units[u].end(), dst);
    });
  }
};

class GenerateGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateGpu, CachedDecoderTracksTransformers) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const auto dir = test::fixtures_dir() / "hf" / GetParam();
  const ModelWeights w = load_model_weights(dir);
  const test::Golden g(dir);
  const auto ids = g.i64("input_ids");
  const auto golden = g.f32("logits");
  const int64_t V = w.config.vocab_size, S = g.seq;
  GpuRig rig(w);
  CachedDecoder decoder(*rig.model, *rig.device, *rig.ops, S);
  for (int64_t r = 0; r < g.batch; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const std::vector<int32_t> row(ids.begin() + r * S, ids.begin() + (r + 1) * S);
    const std::vector<float> expected(golden.begin() + r * S * V, golden.begin() + (r + 1) * S * V);
    decoder.truncate(0);
    const std::vector<float> prefill = decoder.feed_all_logits(row);
    EXPECT_TRUE(tracks(prefill, expected, "prefill vs HF"));

    decoder.truncate(0);
    std::vector<float> stepped = decoder.feed_all_logits(std::span(row).first(3));
    for (int64_t t = 3; t < S; ++t) {
      const std::vector<float>& last = decoder.feed(std::span(row).subspan(static_cast<size_t>(t), 1));
      stepped.insert(stepped.end(), last.begin(), last.end());
    }
    EXPECT_TRUE(tracks(stepped, expected, "decode vs HF"));
    EXPECT_TRUE(tracks(stepped, prefill, "decode vs prefill"));
  }
}

// Greedy tokens on the GPU and on the CPU agree wherever the CPU's top two logits are clearly apart
// (bf16 can swap near-ties).
TEST_P(GenerateGpu, GreedyAgreesWithTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const auto dir = test::fixtures_dir() / "hf" / GetParam();
  const ModelWeights w = load_model_weights(dir);
  const test::Golden g(dir);
  const auto ids = g.i64("input_ids");
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 6);

  SimDeviceOptions options;
  options.require_pinned_host = false;
  auto cpu_device = make_sim_device(options);
  auto cpu_ops = make_device_ops(*cpu_device);
  ResidentModel cpu_model(*cpu_device, w.config, DType::F32, [&](size_t u, float* dst) {
    std::copy(w.units[u].begin(), w.units[u].end(), dst);
  });
  CachedDecoder cpu_decoder(cpu_model, *cpu_device, *cpu_ops, 64);
  GpuRig rig(w);
  CachedDecoder gpu_decoder(*rig.model, *rig.device, *rig.ops, 64);

  std::vector<int32_t> sequence = prompt;
  const std::vector<float>* cpu_logits = &cpu_decoder.feed(sequence);
  const std::vector<float>* gpu_logits = &gpu_decoder.feed(sequence);
  // Both continue with the CPU's choice; a step is compared where the CPU's top two logits are
  // further apart than the two backends' logits can differ (each within 8% of the largest of the
  // goldens, CachedDecoderTracksTransformers).
  const auto argmax = [](const std::vector<float>& l) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  int compared = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<float> sorted = *cpu_logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const int32_t next = argmax(*cpu_logits);
    if (sorted[0] - sorted[1] > 0.2 * max_abs(*cpu_logits)) {
      EXPECT_EQ(argmax(*gpu_logits), next) << "step " << step;
      ++compared;
    }
    const std::vector<int32_t> one{next};
    cpu_logits = &cpu_decoder.feed(one);
    gpu_logits = &gpu_decoder.feed(one);
  }
  EXPECT_GE(compared, 1) << "no step was clear enough to compare";
}

INSTANTIATE_TEST_SUITE_P(Cases, GenerateGpu,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "tied"));

// A model whose bf16 weights exceed the GPU is refused from its config.json alone, with the sizes
// and what to do, before any weight is read (the directory holds none).
TEST(GenerateGpuModel, RefusesAModelLargerThanTheGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  test::ScratchDir dir("generate-gpu-too-large");
  nlohmann::json config =
      nlohmann::json::parse(test::read_file(test::fixtures_dir() / "hf" / "llama3" / "config.json"));
  config["hidden_size"] = 16384;
  config["intermediate_size"] = 53248;
  config["num_hidden_layers"] = 126;
  config["num_attention_heads"] = 128;
  config["num_key_value_heads"] = 8;
  config["vocab_size"] = 128256;
  config.erase("head_dim");
  std::ofstream(dir / "config.json") << config.dump();
  EXPECT_TRUE(test::throws_with([&] { open_generation_model(dir.path(), GenerationBackend::Cuda, 16); },
                                {"does not fit GPU 0", "bf16 weights take", "--device cpu"}));
}

}  // namespace
}  // namespace ferry
