// The Hugging Face goldens on the GPU: the sliding engine on the CUDA device (bf16 weights,
// activations and gradients; fp32 masters and AdamW on the host), with offloading on, must track
// transformers' float64 losses and gradient norms over 3 clipped AdamW steps; so must the
// everything-on-the-GPU mode (fp32 masters and AdamW state on the device, GPU AdamW), and a mix of
// the two (some units with their optimizer on the GPU, the rest streamed through the host). Layers
// that keep their forward intermediates (backward without recompute) appear in the last two.
//
// Tolerance: every GEMM input is rounded to bf16 (unit roundoff 2^-8 = 3.9e-3) and each layer adds
// its share; for these 2-layer models the loss, a mean of log-softmax terms, stays within 2% and
// the gradient norm within 5% of the float64 reference. A wrong op (sign, scale, mask) moves them by
// far more (the loss drops by ~1 after one real step).
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "device/device.h"
#include "engine/sliding_engine.h"
#include "hf_golden.h"
#include "io/safetensors.h"
#include "model/model_weights.h"
#include "ops/device_ops.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

namespace ferry {
namespace {

class HfGoldenGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenGpu, ThreeStepsTrackTransformers) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const auto dir = test::fixtures_dir() / "hf" / GetParam();
  ModelWeights w = load_model_weights(dir);
  const test::Golden golden(dir);
  const nlohmann::json& meta = golden.meta;
  const int64_t B = golden.batch, S = golden.seq;
  const StepBatch batch = test::golden_batch(golden, 1);

  enum class Mode { Streamed, SomeUnitsWithOptimizer, EverythingOnGpu };
  for (Mode mode : {Mode::Streamed, Mode::SomeUnitsWithOptimizer, Mode::EverythingOnGpu}) {
    SCOPED_TRACE(mode == Mode::EverythingOnGpu ? "everything on the GPU"
                 : mode == Mode::SomeUnitsWithOptimizer
                     ? "the last layer (and an untied head) with GPU AdamW, the rest "
                       "streamed"
                     : "streamed, activations offloaded");
    const bool optimizer_on_gpu = mode == Mode::EverythingOnGpu;
    auto device = make_cuda_device(0, size_t{1} << 30);
    auto ops = make_device_ops(*device);
    Plan plan;
    plan.micro_batch = 1;
    plan.gpu_slots = 2;
    plan.units.assign(w.layout.units.size(), UnitPlacement::Streamed);
    if (w.layout.tied) plan.units[0] = UnitPlacement::ResidentParams;
    plan.activations.assign(static_cast<size_t>(w.config.num_layers), ActivationPlacement::OffloadToHost);
    plan.update = UpdateSchedule::AfterBackward;
    if (mode == Mode::SomeUnitsWithOptimizer) {
      // Beside bf16 gradients that land in the host's weight staging: the GPU units' fp32 norm
      // partials join the host's, and their update waits for the host's norm.
      plan.units[w.layout.layer_unit(w.config.num_layers - 1)] = UnitPlacement::ResidentWithOptimizer;
      if (!w.layout.tied) plan.units[w.layout.head_unit()] = UnitPlacement::ResidentWithOptimizer;
      // The last layer keeps its forward intermediates: its backward runs without the recompute.
      plan.activations.back() = ActivationPlacement::KeepWithInternals;
    }
    if (optimizer_on_gpu) {
      plan.grad_dtype = DType::F32;
      plan.units.assign(w.layout.units.size(), UnitPlacement::ResidentWithOptimizer);
      // The first layer recomputes from its kept boundary, the others keep their intermediates
      // with the norms' outputs and the activation (a whole GPU's plan; the last layer above keeps
      // them alone).
      plan.activations.assign(static_cast<size_t>(w.config.num_layers),
                              ActivationPlacement::KeepWithInternals);
      plan.activations.front() = ActivationPlacement::KeepOnGpu;
      plan.kept_internals = KeptInternals::WithActivation;
    }
    SlidingEngine engine(w.config, w.layout, *device, *ops, plan, S, B, false);
    for (size_t u = 0; u < w.units.size(); ++u) engine.host().unit(u).master.assign(w.units[u]);
    engine.weights_changed(0);

    const auto step_loss = golden.f32("step_loss"), norms = golden.f32("grad_norm");
    for (int64_t k = 0; k < 3; ++k) {
      AdamWHyper h;
      h.lr = lr_at(LrSchedule::Cosine, meta["lr"], k, meta["warmup_steps"], meta["total_steps"]);
      h.beta1 = meta["betas"][0];
      h.beta2 = meta["betas"][1];
      h.eps = meta["eps"];
      h.weight_decay = meta["weight_decay"];
      // An evaluation between steps reads the weights the next step reads: its loss is the step's
      // (the same forward kernels), and transformers'.
      const StepLoss evaluated = engine.evaluate(batch);
      EXPECT_NEAR(evaluated.mean(), step_loss[static_cast<size_t>(k)],
                  0.02 * step_loss[static_cast<size_t>(k)])
          << "evaluation before step " << k + 1;
      const SlidingStepResult r = engine.step(k + 1, batch, h, meta["max_grad_norm"]);
      EXPECT_NEAR(evaluated.mean(), r.loss, 1e-3 * r.loss) << "evaluation before step " << k + 1;
      EXPECT_NEAR(r.loss, step_loss[static_cast<size_t>(k)], 0.02 * step_loss[static_cast<size_t>(k)])
          << "step " << k + 1;
      EXPECT_NEAR(r.grad_norm, norms[static_cast<size_t>(k)], 0.05 * norms[static_cast<size_t>(k)])
          << "step " << k + 1;
    }
    engine.finish_updates();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, HfGoldenGpu,
                         ::testing::Values("llama3", "mistral", "qwen2", "qwen3", "tied", "packed", "yarn"));

}  // namespace
}  // namespace ferry
