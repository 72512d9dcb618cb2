// Attention in groups of KV heads (model/decoder_layer.h, head_groups) on the CPU reference.
//
// Against one group, a step in G groups computes the same forward (loss and logits bit for bit)
// and, in the last layer, the same gradients of every parameter but the three whose sums are split
// across groups (the input norm's and the q/k norms' weights); everything the last layer's dx
// reaches differs by rounding only, checked to fp32's tolerance. Within G groups, sequence tiles
// still give the untiled bits, and the sliding engine on the simulated device gives the plain
// trainer's bits (losses, gradient norms, masters after steps). Models: Llama, Qwen2 (q/k/v
// biases), Qwen3 (q/k norms), with 8 query heads over 4 KV heads and 8 over 2 (GQA 2 and 4).
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "data/packing.h"
#include "device/device.h"
#include "engine/model_step.h"
#include "engine/sliding_engine.h"
#include "engine/unit_optimizer.h"
#include "model/decoder_layer.h"
#include "ops/device_ops.h"
#include "packed_batch.h"
#include "sliding_plans.h"
#include "sliding_runs.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

// The preset's tiny model with `heads` query heads of 16 over `kv_heads` KV heads.
ModelConfig tiny_with_heads(const char* preset, int64_t heads, int64_t kv_heads, int64_t layers = 2) {
  nlohmann::json json = preset_config(preset, "tiny").raw;
  json["num_attention_heads"] = heads;
  json["num_key_value_heads"] = kv_heads;
  json["head_dim"] = 16;
  json["num_hidden_layers"] = layers;
  return parse_model_config(json, "test");
}

struct StepResult {
  StepLoss loss;
  std::vector<std::vector<float>> grads;
  std::vector<float> logits;  // (rows, seq_len, V), from an evaluation before the step
};

StepResult run_step(const ModelConfig& config, const StepBatch& batch, int64_t seq_tile,
                    int64_t head_groups) {
  std::vector<std::vector<float>> params;
  init_random_weights(config, 5, params);
  const ModelLayout layout = build_model_layout(config);
  auto ops = make_cpu_ops();
  ModelStep step(config, layout, *ops, batch.chunk_tokens(), batch.chunks(), seq_tile, head_groups);
  StepResult r;
  for (const auto& u : layout.units) r.grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  std::vector<float*> p, g;
  for (auto& u : params) p.push_back(u.data());
  for (auto& u : r.grads) g.push_back(u.data());
  r.logits.resize(static_cast<size_t>(batch.rows * batch.seq_len * config.vocab_size));
  step.evaluate(p, batch, r.logits.data());
  r.loss = step.run(p, g, batch);
  return r;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The parameters of a layer whose gradient sums over the heads of every group in one sum.
bool split_across_groups(const std::string& name) {
  return name == "input_layernorm.weight" || name == "self_attn.q_norm.weight" ||
         name == "self_attn.k_norm.weight";
}

// fp32 over a few thousand terms: each element within 1e-5 of its unit's largest magnitude.
constexpr double kRelativeTolerance = 1e-5;

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  double largest = 0.0, worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << what << " element " << i;
    largest = std::max(largest, std::fabs(static_cast<double>(a[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  ASSERT_GT(largest, 0.0) << what << ": an all-zero gradient tests nothing";
  EXPECT_LE(worst, kRelativeTolerance * largest) << what;
}

struct Heads {
  const char* preset;
  int64_t heads, kv_heads;
};

class HeadGroups : public ::testing::TestWithParam<Heads> {};

TEST_P(HeadGroups, MatchOneGroupWhereTheSumsAgreeAndToRoundingWhereTheyAreSplit) {
  const Heads h = GetParam();
  const ModelConfig config = tiny_with_heads(h.preset, h.heads, h.kv_heads);
  const ModelLayout layout = build_model_layout(config);
  std::vector<PackedRow> rows;
  // Two micro-chunks of 2 rows of 96 tokens: 192 tokens per chunk, several documents each.
  const StepBatch batch = test::packed_batch(config.vocab_size, 96, 4, 2, 3, rows);
  for (int64_t tile : {0, 7, 64}) {
    const StepResult one = run_step(config, batch, tile, 1);
    ASSERT_GT(one.loss.counted_tokens, 0);
    for (int64_t groups = 2; groups <= h.kv_heads; groups *= 2) {
      SCOPED_TRACE(::testing::Message() << h.preset << ", " << groups << " groups, tile " << tile);
      const StepResult grouped = run_step(config, batch, tile, groups);
      EXPECT_EQ(one.loss.loss_sum, grouped.loss.loss_sum);
      EXPECT_TRUE(
          same_bits(one.logits.data(), grouped.logits.data(), static_cast<int64_t>(one.logits.size())))
          << "logits";
      EXPECT_TRUE(same_bits(one.grads.back().data(), grouped.grads.back().data(),
                            static_cast<int64_t>(one.grads.back().size())))
          << "the head's gradient";
      const UnitLayout& last = layout.units[layout.layer_unit(config.num_layers - 1)];
      const std::vector<float>& a = one.grads[layout.layer_unit(config.num_layers - 1)];
      const std::vector<float>& b = grouped.grads[layout.layer_unit(config.num_layers - 1)];
      for (const ParamSlot& p : last.params) {
        if (split_across_groups(p.name)) continue;
        EXPECT_TRUE(same_bits(a.data() + p.offset, b.data() + p.offset, p.numel))
            << "last layer's " << p.name;
      }
      for (size_t u = 0; u < one.grads.size(); ++u)
        expect_close(one.grads[u], grouped.grads[u], layout.units[u].name);
    }
  }
}

TEST_P(HeadGroups, SequenceTilesGiveTheUntiledBitsInGroups) {
  const Heads h = GetParam();
  const ModelConfig config = tiny_with_heads(h.preset, h.heads, h.kv_heads);
  std::vector<PackedRow> rows;
  const StepBatch batch = test::packed_batch(config.vocab_size, 96, 4, 2, 7, rows);
  const int64_t groups = h.kv_heads;
  const StepResult untiled = run_step(config, batch, 0, groups);
  for (int64_t tile : {1, 7, 100}) {
    SCOPED_TRACE(::testing::Message() << h.preset << ", " << groups << " groups, tile " << tile);
    const StepResult tiled = run_step(config, batch, tile, groups);
    EXPECT_EQ(untiled.loss.loss_sum, tiled.loss.loss_sum);
    for (size_t u = 0; u < untiled.grads.size(); ++u)
      EXPECT_TRUE(same_bits(untiled.grads[u].data(), tiled.grads[u].data(),
                            static_cast<int64_t>(untiled.grads[u].size())))
          << "unit " << u;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, HeadGroups,
                         ::testing::Values(Heads{"llama", 8, 4}, Heads{"qwen2", 8, 4}, Heads{"qwen3", 8, 4},
                                           Heads{"llama", 8, 2}, Heads{"qwen3", 8, 2}),
                         [](const ::testing::TestParamInfo<Heads>& info) {
                           return std::string(info.param.preset) + "_" + std::to_string(info.param.heads) +
                                  "_over_" + std::to_string(info.param.kv_heads);
                         });

TEST(HeadGroupsConfig, AGroupCountThatDoesNotSplitTheKvHeadsIsRefused) {
  const ModelConfig config = tiny_with_heads("llama", 8, 4);
  Arena measure = Arena::measuring();
  for (int64_t bad : {0, 3, 8}) {
    try {
      carve_layer_scratch(measure, config, 64, DType::F32, true, 0, bad);
      ADD_FAILURE() << bad << " groups were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("use a divisor of 4"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(carve_layer_scratch(measure, config, 64, DType::F32, true, 0, 4));
}

// The sliding engine with head groups on the simulated device against the plain trainer with the
// same groups: bit for bit, with offloaded boundaries, one boundary in 2 recomputed, tiles, and a
// unit updated on the device.
using test::batch_for;
using test::hyper_at;
using test::keeping_every;
using test::kGlobal;
using test::kMicro;
using test::kSeq;
using test::kSteps;
using test::make_plan;
using test::make_rows;

TEST(HeadGroupsOnTheSimulatedDevice, GiveThePlainTrainersBitsInTheSameGroups) {
  const ModelConfig config = tiny_with_heads("qwen3", 8, 4, 4);
  const ModelLayout layout = build_model_layout(config);
  const std::vector<PackedRow> rows = make_rows(config.vocab_size, 5);
  const test::RunResult one = test::plain_run(config, 9, rows, 0.5);
  for (int64_t groups : {2, 4}) {
    const test::RunResult plain = test::plain_run(config, 9, rows, 0.5, groups);
    const std::vector<Plan> plans = {
        make_plan(layout, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward),
        keeping_every(make_plan(layout, 4, 2, {0, 5}, {0, 2}, UpdateSchedule::AfterBackward), 2),
        make_plan(layout, 4, 3, {3}, {}, UpdateSchedule::AfterBackward, {2}),
    };
    for (size_t i = 0; i < plans.size(); ++i) {
      for (int64_t tile : {0, 7}) {
        Plan plan = plans[i];
        plan.head_groups = groups;
        plan.seq_tile = tile;
        SCOPED_TRACE(::testing::Message() << groups << " groups, plan " << i << ": " << plan.describe());
        const test::RunResult sliding = test::sliding_run(config, 9, rows, 0.5, plan);
        ASSERT_EQ(plain.losses.size(), sliding.losses.size());
        for (size_t s = 0; s < plain.losses.size(); ++s) {
          EXPECT_EQ(plain.losses[s], sliding.losses[s]) << "loss of step " << s + 1;
          EXPECT_EQ(plain.norms[s], sliding.norms[s]) << "grad norm of step " << s + 1;
        }
        for (size_t u = 0; u < plain.masters.size(); ++u)
          EXPECT_TRUE(same_bits(plain.masters[u].data(), sliding.masters[u].data(),
                                static_cast<int64_t>(plain.masters[u].size())))
              << "unit " << u;
      }
    }
    // Against one group: the first step's loss is the same forward; later ones differ by rounding.
    EXPECT_EQ(one.losses[0], plain.losses[0]);
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(one.losses[s], plain.losses[s], 1e-5 * std::fabs(one.losses[s])) << "step " << s + 1;
      EXPECT_NEAR(one.norms[s], plain.norms[s], 1e-5 * one.norms[s]) << "step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace ferry
