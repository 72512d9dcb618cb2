// Sequence tiles (model/decoder_layer.h) on the GPU: the sliding engine on the CUDA device with
// the layers and the head run over tiles must track transformers as the untiled engine does (the
// HF goldens; tiles of 5 and 7 tokens cut their 16- and 24-token rows unevenly, and the 4,096-token
// `long` fixture, when present, is cut into tiles of 1,000), over 3 clipped AdamW steps.
//
// Tolerances are engine_hf_golden_gpu_test.cpp's (bf16 GEMM inputs: loss within 2%, gradient norm
// within 5% of float64), and the tiled run stays within 1% (loss) and 3% (norm) of the untiled one:
// the two differ only in where bf16 gradients are rounded (once per tile) and in cuBLAS's choice
// of kernels for fewer rows.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "device/device.h"
#include "engine/sliding_engine.h"
#include "hf_golden.h"
#include "model/model_weights.h"
#include "ops/device_ops.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

namespace ferry {
namespace {

struct Steps {
  std::vector<double> losses, norms;
};

Steps run_steps(const ModelWeights& w, const test::Golden& golden, int64_t seq_tile, int64_t keep_every = 1) {
  const nlohmann::json& meta = golden.meta;
  const StepBatch batch = test::golden_batch(golden, 1);
  auto device = make_cuda_device(0, size_t{4} << 30);
  auto ops = make_device_ops(*device);
  Plan plan;
  plan.micro_batch = 1;
  plan.gpu_slots = 2;
  plan.seq_tile = seq_tile;
  plan.units.assign(w.layout.units.size(), UnitPlacement::Streamed);
  if (w.layout.tied) plan.units[0] = UnitPlacement::ResidentParams;
  plan.activations.assign(static_cast<size_t>(w.config.num_layers), ActivationPlacement::OffloadToHost);
  plan.activations.back() = ActivationPlacement::KeepOnGpu;
  for (size_t b = 0; b < plan.activations.size(); ++b)
    if (b % static_cast<size_t>(keep_every) != 0) plan.activations[b] = ActivationPlacement::Recompute;
  plan.update = UpdateSchedule::AfterBackward;
  SlidingEngine engine(w.config, w.layout, *device, *ops, plan, golden.seq, golden.batch, false);
  for (size_t u = 0; u < w.units.size(); ++u) engine.host().unit(u).master.assign(w.units[u]);
  engine.weights_changed(0);
  Steps out;
  for (int64_t k = 0; k < 3; ++k) {
    AdamWHyper h;
    h.lr = lr_at(LrSchedule::Cosine, meta["lr"], k, meta["warmup_steps"], meta["total_steps"]);
    h.beta1 = meta["betas"][0];
    h.beta2 = meta["betas"][1];
    h.eps = meta["eps"];
    h.weight_decay = meta["weight_decay"];
    const SlidingStepResult r = engine.step(k + 1, batch, h, meta["max_grad_norm"]);
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
  }
  engine.finish_updates();
  return out;
}

// The golden case of the parameter, its weights, and transformers' losses and norms; skips where
// no GPU or no fixture is.
class SequenceTilesGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU";
    const auto dir = test::fixtures_dir() / "hf" / GetParam();
    if (!std::filesystem::exists(dir / "golden.safetensors")) GTEST_SKIP() << "no fixture at " << dir;
    weights_.emplace(load_model_weights(dir));
    golden_.emplace(dir);
    step_loss_ = golden_->f32("step_loss");
    norms_ = golden_->f32("grad_norm");
  }
  Steps run(int64_t seq_tile, int64_t keep_every = 1) const {
    return run_steps(*weights_, *golden_, seq_tile, keep_every);
  }
  // The tile that cuts the case's rows unevenly: 1,000 of the long case's 4,096 tokens, else 7.
  int64_t uneven_tile() const { return golden_->seq >= 4096 ? 1000 : 7; }
  // Loss within 2% and gradient norm within 5% of transformers' float64 run at step k + 1.
  void expect_tracks_transformers(const Steps& run, size_t k) const {
    EXPECT_NEAR(run.losses[k], step_loss_[k], 0.02 * step_loss_[k]) << "step " << k + 1;
    EXPECT_NEAR(run.norms[k], norms_[k], 0.05 * norms_[k]) << "step " << k + 1;
  }

  std::optional<ModelWeights> weights_;
  std::optional<test::Golden> golden_;
  std::vector<float> step_loss_, norms_;
};

TEST_P(SequenceTilesGpu, TiledStepsTrackTheUntiledAndTransformers) {
  const Steps untiled = run(0);
  const std::vector<int64_t> tiles =
      golden_->seq >= 4096 ? std::vector<int64_t>{1000} : std::vector<int64_t>{5, 7};
  for (int64_t tile : tiles) {
    SCOPED_TRACE("seq_tile " + std::to_string(tile));
    const Steps tiled = run(tile);
    for (size_t k = 0; k < 3; ++k) {
      expect_tracks_transformers(tiled, k);
      EXPECT_NEAR(tiled.losses[k], untiled.losses[k], 0.01 * untiled.losses[k]) << "step " << k + 1;
      EXPECT_NEAR(tiled.norms[k], untiled.norms[k], 0.03 * untiled.norms[k]) << "step " << k + 1;
    }
  }
}

// One boundary in K kept, the others recomputed in the backward (planner/boundary_groups.h): the
// recompute runs the same kernels on the same inputs as the forward, so the steps track the plan
// that keeps every boundary as closely as two runs of that plan do (the backward's fp32 atomics
// aside), tiled and untiled, and transformers as the golden test asks.
TEST_P(SequenceTilesGpu, RecomputedBoundariesTrackEveryBoundaryKept) {
  for (int64_t tile : {int64_t{0}, uneven_tile()}) {
    const Steps all_kept = run(tile);
    for (int64_t keep_every : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << "seq_tile " << tile << ", keep_every " << keep_every);
      const Steps recomputed = run(tile, keep_every);
      for (size_t k = 0; k < 3; ++k) {
        expect_tracks_transformers(recomputed, k);
        EXPECT_NEAR(recomputed.losses[k], all_kept.losses[k], 1e-3 * all_kept.losses[k]) << "step " << k + 1;
        EXPECT_NEAR(recomputed.norms[k], all_kept.norms[k], 1e-2 * all_kept.norms[k]) << "step " << k + 1;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SequenceTilesGpu,
                         ::testing::Values("llama3", "qwen2", "qwen3", "packed", "long"));

}  // namespace
}  // namespace ferry
