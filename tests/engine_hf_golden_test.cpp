// ferry's CPU backend against Hugging Face transformers: logits, loss, every gradient, and the
// parameters after 3 AdamW steps with clipping and warmup (fixtures from tools/make_hf_goldens.py).
//
// Tolerances (the goldens are float64; ferry computes in float32): loss and logits to 1e-5
// relative, gradients and post-step parameters to 1e-4 relative, each with an absolute floor
// scaled to the tensor's magnitude so that entries that are zero up to rounding do not fail.
//
// One exception, from the math of Adam rather than taste: Adam's update m/sqrt(v) is close to the
// sign of the gradient, whatever its size. Where a gradient entry is at float32's noise floor
// (below 1e-4 of its tensor's largest entry: e.g. the k-projection bias along RoPE's slowest
// frequency, whose exact gradient is nearly zero), float32 and float64 can take different steps,
// bounded by 2 * lr per step. Those entries get that bound; they must stay under 1% of the model.
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_step.h"
#include "engine/unit_optimizer.h"
#include "hf_golden.h"
#include "io/safetensors.h"
#include "model/model_weights.h"
#include "optim/lr_schedule.h"
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

std::vector<float> unit_param(const ModelWeights& w, const std::vector<std::vector<float>>& units,
                              const ParamSlot& p, size_t u) {
  return std::vector<float>(units[u].begin() + p.offset, units[u].begin() + p.offset + p.numel);
}

class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, LogitsLossGradientsAndThreeAdamWSteps) {
  const auto dir = test::fixtures_dir() / "hf" / GetParam();
  ModelWeights w = load_model_weights(dir);
  Golden g(dir);
  auto ops = make_cpu_ops();

  for (int64_t micro_batch : {int64_t{1}, g.batch}) {
    SCOPED_TRACE("micro_batch " + std::to_string(micro_batch));
    ModelWeights weights = w;
    const StepBatch batch = golden_batch(g, micro_batch);
    ModelStep step(weights.config, weights.layout, *ops, batch.chunk_tokens(), batch.chunks());
    std::vector<float*> params;
    for (auto& u : weights.units) params.push_back(u.data());

    // Logits, one row at a time (a row is a chunk when micro_batch is 1).
    if (micro_batch == 1) {
      const auto expected = g.f32("logits");
      std::vector<float> logits(expected.size());
      const size_t row = static_cast<size_t>(g.seq * weights.config.vocab_size);
      for (int64_t r = 0; r < g.batch; ++r) step.logits(params, batch.chunk(r), logits.data() + r * row);
      EXPECT_TRUE(test::all_close(logits, expected, 1e-5, 1e-5 * max_abs(expected), "logits"));
    }

    std::vector<std::vector<float>> grads;
    for (const auto& u : weights.layout.units) grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
    std::vector<float*> grad_ptrs;
    for (auto& u : grads) grad_ptrs.push_back(u.data());

    UnitOptimizer optimizer(weights.layout, false);
    AdamWHyper hyper;
    hyper.beta1 = g.meta["betas"][0];
    hyper.beta2 = g.meta["betas"][1];
    hyper.eps = g.meta["eps"];
    hyper.weight_decay = g.meta["weight_decay"];
    const double max_norm = g.meta["max_grad_norm"];
    const double base_lr = g.meta["lr"];
    const int64_t warmup = g.meta["warmup_steps"], total = g.meta["total_steps"];
    const auto golden_norms = g.f32("grad_norm");
    // Per unit, per element: whether any step's gradient was at the noise floor so far.
    std::vector<std::vector<char>> noise_floor;
    for (const auto& u : weights.layout.units) noise_floor.emplace_back(static_cast<size_t>(u.numel), 0);
    double lr_sum = 0.0;
    const auto golden_step_loss = g.f32("step_loss");

    for (int64_t k = 0; k < total; ++k) {
      SCOPED_TRACE("optimizer step " + std::to_string(k + 1));
      const StepLoss loss = step.run(params, grad_ptrs, batch);
      EXPECT_NEAR(loss.mean(), golden_step_loss[k], 1e-5 * std::fabs(golden_step_loss[k])) << "loss";
      if (k == 0) {
        EXPECT_NEAR(loss.mean(), g.f32("loss")[0], 1e-5 * g.f32("loss")[0]);
        for (size_t u = 0; u < weights.layout.units.size(); ++u) {
          for (const auto& p : weights.layout.units[u].params) {
            const auto expected = g.f32("grad." + p.hf_name);
            EXPECT_TRUE(test::all_close(unit_param(weights, grads, p, u), expected, 1e-4,
                                        1e-4 * max_abs(expected), "grad." + p.hf_name));
          }
        }
      }
      std::vector<const float*> const_grads(grad_ptrs.begin(), grad_ptrs.end());
      hyper.lr = lr_at(LrSchedule::Cosine, base_lr, k, warmup, total);
      lr_sum += hyper.lr;
      int64_t flagged = 0, counted = 0;
      for (size_t u = 0; u < weights.layout.units.size(); ++u) {
        for (const auto& p : weights.layout.units[u].params) {
          const auto grad = unit_param(weights, grads, p, u);
          const double floor = 1e-4 * max_abs(grad);
          for (int64_t i = 0; i < p.numel; ++i) {
            char& flag = noise_floor[u][static_cast<size_t>(p.offset + i)];
            const float gi = grad[static_cast<size_t>(i)];
            if (gi != 0.0f && std::fabs(gi) < floor) flag = 1;  // exact zeros (unused rows) are exact
            flagged += flag;
          }
          counted += p.numel;
        }
      }
      EXPECT_LT(flagged, counted / 100)
          << "too many gradient entries at the noise floor for the test to mean much";
      EXPECT_NEAR(hyper.lr, g.meta["lr_per_step"][k].get<double>(), 1e-12);
      const UpdateStats stats = optimizer.step(params, const_grads, hyper, max_norm, k + 1);
      EXPECT_NEAR(stats.grad_norm, golden_norms[k], 1e-5 * golden_norms[k]) << "grad norm";
      EXPECT_LT(stats.clip_coefficient, 1.0f) << "the fixture is meant to clip at every step";
      for (size_t u = 0; u < weights.layout.units.size(); ++u) {
        for (const auto& p : weights.layout.units[u].params) {
          const std::string name = "step" + std::to_string(k + 1) + "." + p.hf_name;
          const auto expected = g.f32(name);
          const auto actual = unit_param(weights, weights.units, p, u);
          std::vector<float> reference = expected;
          for (int64_t i = 0; i < p.numel; ++i) {
            const size_t e = static_cast<size_t>(i);
            // Entries at the noise floor: accept any value within Adam's step bound of the golden.
            if (noise_floor[u][static_cast<size_t>(p.offset + i)] &&
                std::fabs(actual[e] - expected[e]) <= 2.0 * lr_sum)
              reference[e] = actual[e];
          }
          EXPECT_TRUE(test::all_close(actual, reference, 1e-4, 1e-6, name));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, HfGolden,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "tied", "packed", "yarn"));

}  // namespace
}  // namespace ferry
