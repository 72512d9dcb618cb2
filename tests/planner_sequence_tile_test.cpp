// Sequence tiles in the planner (planner/sequence_tile.h): the memory model counts the token-local
// scratch per tile, the cost model charges each tile its launches and GEMM tail, and the search
// picks a tile where the untiled layer does not fit -- the 8B at 65,536 tokens on 24 GiB.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/memory_model.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "planner/sequence_tile.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr int64_t kLong = 65536;

// Every layer streamed through two slots, every boundary offloaded: the leanest plan's shape.
Plan streamed_plan(const ModelLayout& layout, int64_t layers, int64_t seq_tile) {
  Plan p;
  p.seq_tile = seq_tile;
  p.units.assign(layout.units.size(), UnitPlacement::Streamed);
  p.activations.assign(static_cast<size_t>(layers), ActivationPlacement::OffloadToHost);
  return p;
}

PlanRequest long_request(size_t device_gib) {
  PlanRequest r;
  r.seq_len = kLong;
  r.global_batch = 1;
  r.device_budget = device_gib * kGiB;
  r.host_budget = 120 * kGiB;
  return r;
}

TEST(SequenceTile, TileCountsAndTheirCost) {
  EXPECT_EQ(tile_count(65536, 0), 1);
  EXPECT_EQ(tile_count(65536, 65536), 1);
  EXPECT_EQ(tile_count(65536, 100000), 1);
  EXPECT_EQ(tile_count(65536, 4096), 16);
  EXPECT_EQ(tile_count(65537, 4096), 17);
  const LinearTime t{1e-3, 1e-6};
  EXPECT_DOUBLE_EQ(tiled_seconds(t, 8192, 0), t.at(8192));
  // 2 tiles: the fixed part twice, and 2 * kTileTailTokens more tokens of work.
  EXPECT_DOUBLE_EQ(tiled_seconds(t, 8192, 4096), 2e-3 + 1e-6 * (8192 + 2 * kTileTailTokens));
  EXPECT_EQ(seq_tile_candidates(2048, 2048), std::vector<int64_t>{0});
  EXPECT_EQ(seq_tile_candidates(8192, 16384), std::vector<int64_t>{0});
  EXPECT_EQ(seq_tile_candidates(12288, 12288), (std::vector<int64_t>{0, 1024, 2048, 4096, 8192}));
  EXPECT_EQ(seq_tile_candidates(65536, 65536), (std::vector<int64_t>{0, 1024, 2048, 4096, 8192, 16384}));
}

// A tiled Qwen3 backward computes its q/k projections again (their outputs feed the q/k norms'
// backward): their share of the layer's weight FLOPs; nothing for Llama or one tile.
TEST(SequenceTile, QkNormModelsPayTheirQkProjectionsAgainWhenTiled) {
  nlohmann::json json = {{"architectures", {"Qwen3ForCausalLM"}},
                         {"model_type", "qwen3"},
                         {"vocab_size", 151936},
                         {"hidden_size", 4096},
                         {"intermediate_size", 12288},
                         {"num_hidden_layers", 36},
                         {"num_attention_heads", 32},
                         {"num_key_value_heads", 8},
                         {"head_dim", 128},
                         {"max_position_embeddings", 40960},
                         {"rms_norm_eps", 1e-6},
                         {"rope_theta", 1000000.0},
                         {"tie_word_embeddings", false},
                         {"torch_dtype", "bfloat16"}};
  const ModelConfig qwen3 = parse_model_config(json, "qwen3-8b shape");
  ASSERT_TRUE(qwen3.qk_norm);
  const double share = 4096.0 * (4096 + 1024) / (4096.0 * (2 * 4096 + 2 * 1024) + 3.0 * 4096 * 12288);
  EXPECT_DOUBLE_EQ(tiled_backward_extra_share(qwen3, 32768, 4096), share);
  EXPECT_NEAR(share, 0.11, 0.01);
  EXPECT_EQ(tiled_backward_extra_share(qwen3, 32768, 0), 0.0);
  EXPECT_EQ(tiled_backward_extra_share(test::llama_8b(), 32768, 4096), 0.0);
}

// The scratch is O(tile x width) plus the attention's full-length tensors (q, k, v, attn, their
// gradients: 40 KiB a token, 2.5 GiB at 64K): it falls with the tile, and the 8B's at 64K tokens
// goes from over 7 GiB untiled to under 4 GiB at 4,096-token tiles.
TEST(SequenceTile, DeviceMemoryFallsWithTheTile) {
  const ModelConfig config = test::llama_8b();
  const ModelLayout layout = build_model_layout(config);
  size_t previous = 0;
  for (int64_t tile : {16384, 8192, 4096, 2048, 1024}) {
    const DeviceBytes d =
        device_bytes(config, layout, streamed_plan(layout, config.num_layers, tile), kLong, 1);
    const DeviceBytes untiled =
        device_bytes(config, layout, streamed_plan(layout, config.num_layers, 0), kLong, 1);
    EXPECT_LT(d.scratch, untiled.scratch) << tile;
    if (previous > 0) {
      EXPECT_LT(d.scratch, previous) << tile;
    }
    previous = d.scratch;
    if (tile == 4096) {
      EXPECT_LT(d.scratch, 4 * kGiB);
    }
  }
  EXPECT_GT(device_bytes(config, layout, streamed_plan(layout, config.num_layers, 0), kLong, 1).scratch,
            7 * kGiB);
}

// The time of the same plan for each tile: smaller tiles cost more launches and GEMM tails, never
// less, and 4,096-token tiles cost the 8B's 64K-token step under 5% more than no tiles (16 tiles'
// launches and GEMM tails: 3% of the layers' GEMM work).
TEST(SequenceTile, PredictedTimeForEachTile) {
  const ModelConfig config = test::llama_8b();
  const ModelLayout layout = build_model_layout(config);
  const MachineProfile profile = nominal_profile(config, kLong, DType::BF16);
  const StepShape shape{kLong, 1};
  double previous = 0.0, untiled = 0.0;
  for (int64_t tile : {0, 16384, 8192, 4096, 2048, 1024}) {
    const Prediction p =
        predict(config, layout, streamed_plan(layout, config.num_layers, tile), profile, shape);
    if (tile == 0) untiled = p.step_seconds;
    EXPECT_GE(p.step_seconds, previous) << tile;
    previous = p.step_seconds;
    if (tile == 4096) {
      EXPECT_LT(p.step_seconds, 1.05 * untiled);
    }
    std::printf("seq_tile %6lld: %.3f s per step\n", static_cast<long long>(tile), p.step_seconds);
  }
}

// 65,536 tokens of the 8B at gpu_memory 24 GiB: untiled, with all heads' attention at once, the
// smallest plan needs ~27 GiB and is refused (attention in groups of KV heads would make room too:
// planner_head_groups_test.cpp); the search finds a tiled plan that fits.
TEST(SequenceTile, EightBAt64KFitsTwentyFourGiBWithTiles) {
  const ModelConfig config = test::llama_8b();
  const ModelLayout layout = build_model_layout(config);
  const MachineProfile profile = nominal_profile(config, kLong, DType::BF16);
  PlanRequest untiled = long_request(24);
  untiled.seq_tile = 0;
  untiled.head_groups = 1;
  EXPECT_THROW(search_plans(config, layout, profile, untiled), Error);

  const SearchResult r = search_plans(config, layout, profile, long_request(24));
  EXPECT_GT(r.best.plan.seq_tile, 0);
  EXPECT_LT(r.best.plan.seq_tile, kLong);
  EXPECT_LE(r.best.prediction.device.total(), 24 * kGiB);
  for (auto a : r.best.plan.activations) EXPECT_NE(a, ActivationPlacement::KeepWithInternals);

  PlanRequest forced = long_request(24);
  forced.seq_tile = 4096;
  EXPECT_EQ(search_plans(config, layout, profile, forced).best.plan.seq_tile, 4096);
}

}  // namespace
}  // namespace ferry
