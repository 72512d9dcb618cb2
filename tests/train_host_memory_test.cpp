// Host bytes of the memory model on real shapes (issue 5): Llama-3.1-8B at gpu_memory 24GiB needs
// at most 14 bytes/param of host memory plus the boundary activations it offloads (and a few MiB
// of token staging and mapping round-up), whichever way its weights are uploaded; a unit whose
// optimizer runs on the GPU needs no pinned staging.
#include "model/unit_layout.h"
#include "optim/clip.h"
#include "optim/host_array.h"
#include "planner/memory_model.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

constexpr int64_t kSeq = 8192, kChunks = 8;

size_t parameters(const ModelLayout& layout) {
  size_t n = 0;
  for (const auto& u : layout.units) n += static_cast<size_t>(u.numel);
  return n;
}

size_t offloaded_activation_bytes(const ModelConfig& config, const Plan& plan) {
  size_t bytes = 0;
  const size_t one =
      round_to_256(static_cast<size_t>(kChunks * kSeq * config.hidden_size) * dtype_size(plan.weight_dtype));
  for (auto a : plan.activations) bytes += a == ActivationPlacement::OffloadToHost ? one : 0;
  return bytes;
}

TEST(HostBytes, Llama8BAt24GiBIsFourteenBytesPerParamPlusActivations) {
  const ModelConfig config = preset_config("llama", "llama-3.1-8b");
  const ModelLayout layout = build_model_layout(config);
  PlanRequest request;
  request.micro_batch = 1;
  request.seq_len = kSeq;
  request.global_batch = kChunks;
  request.device_budget = size_t{24} << 30;
  const Plan plan =
      search_plans(config, layout, nominal_profile(config, kSeq, DType::BF16), request).best.plan;
  const HostBytes h = host_bytes(config, layout, plan, kSeq, kChunks);
  const size_t n = parameters(layout);
  const size_t activations = offloaded_activation_bytes(config, plan);
  // Each of the 3 × 34 fp32 arrays rounds up to a whole 4 KiB page; tokens (1.25 MiB) and the
  // loss; the gradient-norm partials' readback: 8 bytes per 8Ki parameters (0.001 bytes/param).
  // The embedding's token-row gradients land in an offloaded boundary's buffer: nothing more.
  ASSERT_TRUE(row_gradients_share_an_offloaded_boundary(plan));
  const size_t partials = (n / kGradNormChunk + layout.units.size() * 8) * sizeof(double);
  const size_t slack = 3 * layout.units.size() * 4096 + (size_t{2} << 20) + partials;
  EXPECT_LE(h.total(), 14 * n + activations + slack) << plan.describe();
  EXPECT_GE(h.total(), 12 * n + activations);  // fp32 master, m and v at least
  // Pinned: the bf16 staging (2 bytes/param), or, converting on upload, the masters (4) and the
  // gradients' buffers (at most 2; with clipping one per unit but the row-sparse embedding).
  const size_t pinned_per_param = plan.weight_upload == WeightUpload::HostShadow ? 2 : 6;
  EXPECT_LE(h.pinned, pinned_per_param * n + activations + slack);
  std::printf(
      "Llama-3.1-8B, 24 GiB: %s\n  host %.1f GB for %.2fB params = %.3f bytes/param + %.1f GB of offloaded "
      "activations\n",
      plan.describe().c_str(), h.total() / 1e9, n / 1e9, static_cast<double>(h.total() - activations) / n,
      activations / 1e9);
}

TEST(HostBytes, UnitsWithTheirOptimizerOnTheGpuNeedNoStaging) {
  const ModelConfig config = preset_config("llama", "llama-3.1-8b");
  const ModelLayout layout = build_model_layout(config);
  Plan plan;
  plan.units.assign(layout.units.size(), UnitPlacement::Streamed);
  plan.activations.assign(static_cast<size_t>(config.num_layers), ActivationPlacement::KeepOnGpu);
  const HostBytes streamed = host_bytes(config, layout, plan, kSeq, kChunks);
  const size_t u = layout.layer_unit(31), numel = static_cast<size_t>(layout.units[u].numel);
  plan.units[u] = UnitPlacement::ResidentWithOptimizer;
  const HostBytes mixed = host_bytes(config, layout, plan, kSeq, kChunks);
  EXPECT_EQ(mixed.pageable, streamed.pageable);  // the host keeps its master, m, v for checkpoints
  const GpuOptimizerBytes g = gpu_optimizer_bytes(layout, plan);
  EXPECT_EQ(g.partials, grad_norm_partials(layout.units[u]));
  // Its norm partials come down either way: computed before its gradient's d2h when streamed, by
  // the device optimizer when resident.
  EXPECT_EQ(mixed.pinned, streamed.pinned - numel * 2 + g.staging_elements * 4 + 256);
  // On the device: weights, fp32 gradients, master, m, v instead of a share of the slots.
  const DeviceBytes d = device_bytes(config, layout, plan, kSeq, kChunks);
  EXPECT_GE(d.resident, numel * 18);
}

}  // namespace
}  // namespace ferry
