// The memory model's arithmetic on the Llama-3.1-8B shape: the CUDA ops' working memory of the
// worked example in memory_model.h, slots sized to the largest streamed unit, and the bf16
// weight-gradient sum only where layers have bf16 gradients.
#include <gtest/gtest.h>

#include "planner/memory_model.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(MemoryModel, CudaOpsWorkspaceOfTheWorkedExample) {
  const ModelConfig c = test::llama_8b();
  const size_t bf16 = cuda_ops_workspace_bytes(c, 8192, DType::BF16);
  // memory_model.h's worked example: 951 MiB, of which 501 MiB logits, 290 MiB attention (cuDNN's
  // backward).
  EXPECT_GE(bf16, 950 * kMiB);
  EXPECT_LE(bf16, 952 * kMiB);
  // fp32 gradients need no bf16 sum of the largest weight gradient (14336 x 4096 x 2 bytes).
  EXPECT_EQ(bf16 - cuda_ops_workspace_bytes(c, 8192, DType::F32), size_t{14336} * 4096 * 2);
}

// The head's weight gradient over four logits chunks (Plan::head_weight_grad_chunks) holds four
// chunks' bf16 logits (2048 tokens of the 128k vocabulary each), or the micro-chunk's where it has
// fewer tokens; one chunk's without it.
TEST(MemoryModel, TheHeadsWeightGradientOverSeveralChunksHoldsTheirLogits) {
  const ModelConfig c = test::llama_8b();
  const size_t Vp = 128256, chunk = 2048;
  ASSERT_EQ(static_cast<size_t>(c.vocab_size), Vp);
  const auto workspace = [&](int64_t tokens, int64_t chunks) {
    return cuda_ops_workspace_bytes(c, tokens, DType::BF16, 1, chunks);
  };
  EXPECT_EQ(workspace(65536, 4) - workspace(65536, 1), 3 * chunk * Vp * 2);
  EXPECT_EQ(workspace(65536, 8) - workspace(65536, 1), 7 * chunk * Vp * 2);
  EXPECT_EQ(workspace(5000, 4) - workspace(5000, 1), (5000 - chunk) * Vp * 2);
  EXPECT_EQ(workspace(1024, 4), workspace(1024, 1));
}

// A layer that keeps its internals keeps the GEMMs' and the attention's outputs, not the norms'
// outputs or the activation (decoder_layer.h): per token x1 (H), q and the attention output (QD
// each), k and v (KD each), gate and up (F each) in bf16, and the attention's fp32 statistics per
// query head. With 8192 tokens every tensor is a multiple of the arena's 256-byte alignment, so
// the sum is exact (the model adds one alignment and rounds to 256).
TEST(MemoryModel, KeptInternalsAreTheGemmAndAttentionOutputs) {
  const ModelConfig c = test::llama_8b();
  const size_t T = 8192, H = 4096, QD = 4096, KD = 1024, F = 14336, heads = 32;
  ASSERT_EQ(static_cast<size_t>(c.q_dim()), QD);
  ASSERT_EQ(static_cast<size_t>(c.kv_dim()), KD);
  ASSERT_FALSE(c.qk_norm);
  const size_t kept = T * (H + 2 * QD + 2 * KD + 2 * F) * 2 + heads * T * 4;
  EXPECT_EQ(layer_internals_bytes(c, static_cast<int64_t>(T), DType::BF16, KeptInternals::Products),
            kept + 256);
  // 84.1 KiB per token; the norms' outputs and the activation (2H + F values) would add 44 KiB.
  EXPECT_NEAR(static_cast<double>(kept) / T / 1024, 84.1, 0.05);
  // With the norms' outputs (KeptInternals::WithNorms): h and h2 (H each, bf16) and their fp32
  // rstd per token, 16 KiB a token more; with the activation as well, F bf16 values more.
  const size_t norms = T * (2 * H * 2 + 2 * 4), act = T * F * 2;
  EXPECT_EQ(layer_internals_bytes(c, static_cast<int64_t>(T), DType::BF16, KeptInternals::WithNorms),
            kept + norms + 256);
  EXPECT_EQ(layer_internals_bytes(c, static_cast<int64_t>(T), DType::BF16, KeptInternals::WithActivation),
            kept + norms + act + 256);
}

// The planner's device total grows by the norms' outputs (and the activation) of every layer
// keeping internals.
TEST(MemoryModel, NormOutputsWithTheInternalsAreCounted) {
  const ModelConfig c = test::llama_8b();
  const ModelLayout layout = build_model_layout(c);
  const int64_t T = 8192, chunks = 2;
  Plan p;
  p.units.assign(layout.units.size(), UnitPlacement::ResidentParams);
  p.activations.assign(static_cast<size_t>(c.num_layers), ActivationPlacement::KeepOnGpu);
  for (size_t l : {29, 30, 31}) p.activations[l] = ActivationPlacement::KeepWithInternals;
  for (const KeptInternals kept : {KeptInternals::WithNorms, KeptInternals::WithActivation}) {
    Plan more_kept = p;
    more_kept.kept_internals = kept;
    const size_t more = layer_internals_bytes(c, T, DType::BF16, kept) -
                        layer_internals_bytes(c, T, DType::BF16, KeptInternals::Products);
    EXPECT_EQ(device_bytes(c, layout, more_kept, T, chunks).activations,
              device_bytes(c, layout, p, T, chunks).activations + 3 * chunks * more);
  }
}

class MemoryModelPlans : public ::testing::Test {
 protected:
  const ModelConfig config_ = test::llama_8b();
  const ModelLayout layout_ = build_model_layout(config_);
  Plan plan(UnitPlacement all) const {
    Plan p;
    p.gpu_slots = 2;
    p.units.assign(layout_.units.size(), all);
    p.activations.assign(static_cast<size_t>(config_.num_layers), ActivationPlacement::OffloadToHost);
    return p;
  }
};

// Streaming the 525 M-parameter head (lm_head and final norm) sizes both slots to it; keeping the
// embedding and the head resident shrinks them to a 218 M-parameter layer's.
TEST_F(MemoryModelPlans, SlotsAreSizedToTheLargestStreamedUnit) {
  Plan p = plan(UnitPlacement::Streamed);
  const size_t head = static_cast<size_t>(layout_.units[layout_.head_unit()].numel);
  const size_t layer = static_cast<size_t>(layout_.units[layout_.layer_unit(0)].numel);
  EXPECT_EQ(device_bytes(config_, layout_, p, 8192, 8).slots, 2 * 2 * round_to_256(head * 2));
  p.units[layout_.embedding_unit()] = p.units[layout_.head_unit()] = UnitPlacement::ResidentParams;
  EXPECT_EQ(device_bytes(config_, layout_, p, 8192, 8).slots, 2 * 2 * round_to_256(layer * 2));
}

TEST_F(MemoryModelPlans, TheWeightGradientProductServesBf16LayerGradientsOnly) {
  const DeviceBytes streamed = device_bytes(config_, layout_, plan(UnitPlacement::Streamed), 8192, 8);
  const DeviceBytes on_gpu =
      device_bytes(config_, layout_, plan(UnitPlacement::ResidentWithOptimizer), 8192, 8);
  EXPECT_EQ(streamed.ops_workspace, cuda_ops_workspace_bytes(config_, 8192, DType::BF16));
  EXPECT_EQ(on_gpu.ops_workspace, cuda_ops_workspace_bytes(config_, 8192, DType::F32));
}

// A layer's internals on the host: its boundary's pinned buffer and one for its internals of every
// micro-chunk; on the device no internals of its own, but a staging ring of one layer's internals
// for one such layer and of two for more.
TEST_F(MemoryModelPlans, InternalsOnTheHostArePinnedAndStagedThroughARing) {
  const int64_t T = 8192, chunks = 8;
  const size_t internals =
      static_cast<size_t>(chunks) * layer_internals_bytes(config_, T, DType::BF16, KeptInternals::Products);
  const Plan base = plan(UnitPlacement::Streamed);
  Plan one = base, three = base;
  one.activations[0] = ActivationPlacement::OffloadWithInternals;
  for (size_t l : {0, 2, 5}) three.activations[l] = ActivationPlacement::OffloadWithInternals;
  const HostBytes host = host_bytes(config_, layout_, base, T, chunks);
  EXPECT_EQ(host_bytes(config_, layout_, one, T, chunks).pinned, host.pinned + internals);
  EXPECT_EQ(host_bytes(config_, layout_, three, T, chunks).pinned, host.pinned + 3 * internals);
  const DeviceBytes device = device_bytes(config_, layout_, base, T, chunks);
  EXPECT_EQ(device_bytes(config_, layout_, one, T, chunks).activations, device.activations + internals);
  EXPECT_EQ(device_bytes(config_, layout_, three, T, chunks).activations, device.activations + 2 * internals);
}

// In sweeps (Plan::sweeps) the boundaries and kept internals hold one sweep's micro-chunks (the last
// sweep of 8 chunks in 3 holds 2, the buffers 3), the token arrays the step's; the activation
// gradients hold at least the step's embedding rows where the host updates the embedding from them
// (65,536 rows of a 128,256 vocabulary for 8 chunks of 8,192 tokens: 8 times one sweep's tokens in
// 8 sweeps), and one sweep's where the GPU updates it.
TEST_F(MemoryModelPlans, SweepsHoldOneSweepsActivationsAndTheStepsTokens) {
  const int64_t T = 8192, chunks = 8;
  const size_t H = static_cast<size_t>(config_.hidden_size);
  Plan whole = plan(UnitPlacement::ResidentParams);
  for (size_t l = 0; l < whole.activations.size(); ++l)
    whole.activations[l] = l % 2 ? ActivationPlacement::KeepWithInternals : ActivationPlacement::KeepOnGpu;
  Plan three = whole, eight = whole;
  three.sweeps = 3;
  eight.sweeps = 8;
  EXPECT_EQ(sweep_chunks(three, chunks), 3);
  EXPECT_EQ(sweep_chunks(eight, chunks), 1);
  const auto boundary = [&](int64_t c) { return round_to_256(static_cast<size_t>(c * T) * H * 2); };
  const size_t internals = layer_internals_bytes(config_, T, DType::BF16, KeptInternals::Products);
  const int64_t L = config_.num_layers;
  const auto expected_activations = [&](int64_t held, size_t gradients) {
    // every boundary, every other layer's internals, the head input, the activation gradients
    return static_cast<size_t>(L) * boundary(held) + static_cast<size_t>(L / 2 * held) * internals +
           boundary(held) + gradients;
  };
  EXPECT_EQ(device_bytes(config_, layout_, whole, T, chunks).activations,
            expected_activations(chunks, boundary(chunks)));
  const size_t rows = round_to_256(static_cast<size_t>(chunks * T) * H * 2);
  EXPECT_EQ(device_bytes(config_, layout_, three, T, chunks).activations, expected_activations(3, rows));
  EXPECT_EQ(activation_gradient_bytes(config_, layout_, eight, T, chunks), rows);
  EXPECT_EQ(device_bytes(config_, layout_, eight, T, chunks).activations, expected_activations(1, rows));
  EXPECT_EQ(device_bytes(config_, layout_, eight, T, chunks).other,
            device_bytes(config_, layout_, whole, T, chunks).other);
  // With the embedding's optimizer on the GPU its gradient never leaves whole-table: one sweep's.
  eight.units[layout_.embedding_unit()] = UnitPlacement::ResidentWithOptimizer;
  EXPECT_EQ(activation_gradient_bytes(config_, layout_, eight, T, chunks), boundary(1));
}

// Converting on upload without clipping: the 32 layers' gradients take turns in three layer-sized
// buffers, the 525 M-parameter head keeps one of its own, the untied embedding's token rows land
// in the row-gradient buffer; the fp32 masters are pinned, m and v pageable. The host then holds
// 12 bytes/param plus four units' gradients instead of 14 bytes/param: 13.7 GB less for the 8B.
TEST_F(MemoryModelPlans, ConvertingOnUploadWithoutClippingSharesARingOfGradientBuffers) {
  Plan shadow = plan(UnitPlacement::Streamed);
  shadow.update = UpdateSchedule::DuringBackward;
  Plan convert = shadow;
  convert.weight_upload = WeightUpload::ConvertOnUpload;
  const size_t head = static_cast<size_t>(layout_.units[layout_.head_unit()].numel);
  const size_t layer = static_cast<size_t>(layout_.units[layout_.layer_unit(0)].numel);

  const GradientLanding g = gradient_landing(layout_, convert);
  EXPECT_EQ(g.ring_buffers, 3u);
  EXPECT_EQ(g.ring_elements, layer);
  for (int64_t l = 0; l < config_.num_layers; ++l) EXPECT_TRUE(g.in_ring[layout_.layer_unit(l)]);
  EXPECT_TRUE(g.dedicated[layout_.head_unit()]);
  EXPECT_FALSE(g.in_ring[layout_.embedding_unit()] || g.dedicated[layout_.embedding_unit()]);

  const HostBytes hs = host_bytes(config_, layout_, shadow, 8192, 8);
  const HostBytes hc = host_bytes(config_, layout_, convert, 8192, 8);
  size_t params = 0;
  for (const auto& u : layout_.units) params += static_cast<size_t>(u.numel);
  // Shadow: 2 bytes/param of staging; converting: the ring and the head's buffer instead.
  const double saved = static_cast<double>(hs.total()) - static_cast<double>(hc.total());
  EXPECT_NEAR(saved, 2.0 * static_cast<double>(params) - 2.0 * static_cast<double>(3 * layer + head), 1e8);
  EXPECT_GT(saved, 13.6e9);
  // 64 MiB of fp32 pieces on the device.
  EXPECT_EQ(device_bytes(config_, layout_, convert, 8192, 8).other -
                device_bytes(config_, layout_, shadow, 8192, 8).other,
            round_to_256(kConversionStagingElements * sizeof(float)));

  // With clipping each gradient waits for the norm in a buffer of its own: the only saving is the
  // row-sparse embedding's weight copy (its gradient rows land elsewhere either way).
  Plan clipped = convert;
  clipped.update = UpdateSchedule::AfterBackward;
  EXPECT_EQ(gradient_landing(layout_, clipped).ring_buffers, 0u);
  Plan clipped_shadow = shadow;
  clipped_shadow.update = UpdateSchedule::AfterBackward;
  EXPECT_EQ(host_bytes(config_, layout_, clipped_shadow, 8192, 8).total() -
                host_bytes(config_, layout_, clipped, 8192, 8).total(),
            static_cast<size_t>(layout_.units[layout_.embedding_unit()].numel) * 2);
}

}  // namespace
}  // namespace ferry
