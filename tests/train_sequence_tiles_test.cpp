// Sequence tiles (model/decoder_layer.h) on the CPU reference: a step whose layers and head run
// over tiles of T tokens gives the untiled step's loss and gradients bit for bit, for tiles that
// divide the chunk and tiles that do not, one-token tiles, tiles longer than the chunk, packed
// documents, and every layer variant (Llama; Qwen2's q/k/v biases; Qwen3's q/k norms).
#include <cstring>
#include <random>

#include "data/packing.h"
#include "engine/model_step.h"
#include "packed_batch.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

struct StepResult {
  StepLoss loss;
  std::vector<std::vector<float>> grads;
  StepLoss evaluated;         // ModelStep::evaluate before the step
  std::vector<float> logits;  // (rows, seq_len, V), from the evaluation
};

StepResult run_step(const ModelConfig& config, const StepBatch& batch, int64_t seq_tile) {
  std::vector<std::vector<float>> params;
  init_random_weights(config, 5, params);
  const ModelLayout layout = build_model_layout(config);
  auto ops = make_cpu_ops();
  ModelStep step(config, layout, *ops, batch.chunk_tokens(), batch.chunks(), seq_tile);
  StepResult r;
  for (const auto& u : layout.units) r.grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<float*> p, g;
  for (auto& u : params) p.push_back(u.data());
  for (auto& u : r.grads) g.push_back(u.data());
  r.logits.resize(static_cast<size_t>(batch.rows * batch.seq_len * config.vocab_size));
  r.evaluated = step.evaluate(p, batch, r.logits.data());
  r.loss = step.run(p, g, batch);
  return r;
}

void expect_same_bits(const StepResult& untiled, const StepResult& tiled, int64_t tile) {
  EXPECT_EQ(untiled.loss.loss_sum, tiled.loss.loss_sum) << "tile " << tile;
  EXPECT_EQ(untiled.loss.counted_tokens, tiled.loss.counted_tokens);
  EXPECT_EQ(untiled.evaluated.loss_sum, tiled.evaluated.loss_sum) << "evaluation, tile " << tile;
  EXPECT_EQ(untiled.evaluated.loss_sum, untiled.loss.loss_sum);
  EXPECT_EQ(0, std::memcmp(untiled.logits.data(), tiled.logits.data(), untiled.logits.size() * 4))
      << "logits, tile " << tile;
  ASSERT_EQ(untiled.grads.size(), tiled.grads.size());
  for (size_t u = 0; u < untiled.grads.size(); ++u)
    EXPECT_EQ(0, std::memcmp(untiled.grads[u].data(), tiled.grads[u].data(), untiled.grads[u].size() * 4))
        << "unit " << u << ", tile " << tile;
}

class SequenceTiles : public ::testing::TestWithParam<const char*> {};

TEST_P(SequenceTiles, GiveTheUntiledStepBitForBit) {
  const ModelConfig config = preset_config(GetParam(), "tiny");
  std::vector<PackedRow> rows;
  // Two micro-chunks of 2 rows of 96 tokens: 192 tokens per chunk, several documents each.
  const StepBatch batch = test::packed_batch(config.vocab_size, 96, 4, 2, 3, rows);
  const StepResult untiled = run_step(config, batch, 0);
  ASSERT_GT(untiled.loss.counted_tokens, 0);
  for (int64_t tile : {1, 7, 64, 100, 192, 500})
    expect_same_bits(untiled, run_step(config, batch, tile), tile);
}

INSTANTIATE_TEST_SUITE_P(Presets, SequenceTiles, ::testing::Values("llama", "qwen2", "qwen3"));

}  // namespace
}  // namespace ferry
