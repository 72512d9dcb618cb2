// Attention in groups of KV heads (model/decoder_layer.h, head_groups) on the GPU: the sliding
// engine on the CUDA device with the attention of 4 groups of one KV head each must track the
// engine with one group over 3 clipped AdamW steps, untiled and with sequence tiles, for head_dim
// 64 and 128 (the tensor-core kernels, or cuDNN on rows of whole sequences).
//
// The forward computes the same thing in other GEMM shapes (a group's rows of q_proj, k_proj,
// v_proj) and attention calls of fewer heads; the backward adds each group's share of the input
// norm's gradient to the bf16 activation gradient in turn (4 roundings instead of one), as it adds
// a tile's. Tolerances are engine_sequence_tiles_gpu_test.cpp's against the untiled engine: the
// loss within 1%, the gradient norm within 3%.
#include <cmath>
#include <random>

#include "data/packing.h"
#include "device/device.h"
#include "engine/sliding_engine.h"
#include "ops/device_ops.h"
#include "optim/lr_schedule.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

// A random model of 2 layers: hidden 256, 8 query heads of `head_dim` over 4 KV heads.
ModelConfig grouped_model(int64_t head_dim) {
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["hidden_size"] = 256;
  json["intermediate_size"] = 512;
  json["num_attention_heads"] = 8;
  json["num_key_value_heads"] = 4;
  json["head_dim"] = head_dim;
  return parse_model_config(json, "test");
}

// Two rows of 512 tokens, each one random document (whole sequences: cuDNN may run them).
StepBatch random_batch(int64_t vocab, std::vector<PackedRow>& storage) {
  std::mt19937_64 rng(17);
  std::vector<Document> docs;
  for (int d = 0; d < 2; ++d) {
    Document doc;
    for (int i = 0; i < 512; ++i) {
      const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      doc.input_ids.push_back(id);
      doc.labels.push_back(i == 0 ? kIgnoreIndex : id);
    }
    docs.push_back(doc);
  }
  storage = pack_documents(docs, 512, false);
  std::vector<const PackedRow*> picked;
  for (const PackedRow& row : storage) picked.push_back(&row);
  return make_step_batch(picked, 512, 1);
}

struct Steps {
  std::vector<double> losses, norms;
};

Steps run_steps(const ModelConfig& config, const StepBatch& batch, int64_t head_groups, int64_t seq_tile) {
  std::vector<std::vector<float>> units;
  init_random_weights(config, 3, units);
  const ModelLayout layout = build_model_layout(config);
  auto device = make_cuda_device(0, size_t{4} << 30);
  auto ops = make_device_ops(*device);
  Plan plan;
  plan.micro_batch = 1;
  plan.gpu_slots = 2;
  plan.seq_tile = seq_tile;
  plan.head_groups = head_groups;
  plan.units.assign(layout.units.size(), UnitPlacement::Streamed);
  plan.activations.assign(static_cast<size_t>(config.num_layers), ActivationPlacement::OffloadToHost);
  plan.update = UpdateSchedule::AfterBackward;
  SlidingEngine engine(config, layout, *device, *ops, plan, batch.seq_len, batch.chunks(), false);
  for (size_t u = 0; u < units.size(); ++u) engine.host().unit(u).master.assign(units[u]);
  engine.weights_changed(0);
  Steps out;
  for (int64_t k = 0; k < 3; ++k) {
    AdamWHyper h;
    h.lr = lr_at(LrSchedule::Cosine, 1e-3, k, 1, 3);
    const SlidingStepResult r = engine.step(k + 1, batch, h, 1.0);
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
  }
  engine.finish_updates();
  return out;
}

class HeadGroupsGpu : public ::testing::TestWithParam<int64_t> {};

TEST_P(HeadGroupsGpu, FourGroupsTrackOneGroup) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  const ModelConfig config = grouped_model(GetParam());
  std::vector<PackedRow> rows;
  const StepBatch batch = random_batch(config.vocab_size, rows);
  const Steps one = run_steps(config, batch, 1, 0);
  for (int64_t tile : {0, 200}) {
    SCOPED_TRACE(::testing::Message() << "seq_tile " << tile);
    const Steps grouped = run_steps(config, batch, 4, tile);
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(std::isfinite(grouped.losses[k]) && std::isfinite(grouped.norms[k])) << "step " << k + 1;
      EXPECT_NEAR(grouped.losses[k], one.losses[k], 0.01 * one.losses[k]) << "step " << k + 1;
      EXPECT_NEAR(grouped.norms[k], one.norms[k], 0.03 * one.norms[k]) << "step " << k + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, HeadGroupsGpu, ::testing::Values(64, 128));

}  // namespace
}  // namespace ferry
