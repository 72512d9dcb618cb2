// The planner for several devices (Plan::devices): host memory once, each device's own pinned
// buffers counted per device, and the collectives charged from the profile's bus bandwidth.
#include <gtest/gtest.h>

#include "model/unit_layout.h"
#include "planner/collective_cost.h"
#include "planner/cost_model.h"
#include "planner/memory_model.h"
#include "planner/nominal_profile.h"
#include "planner_shapes.h"

namespace ferry {
namespace {

using test::llama_8b;

constexpr int64_t kSeq = 2048;

Plan streamed_plan(const ModelLayout& layout, int64_t layers, int64_t devices, int64_t micro_batch) {
  Plan p;
  p.devices = devices;
  p.micro_batch = micro_batch;
  p.gpu_slots = 2;
  p.units.assign(layout.units.size(), UnitPlacement::Streamed);
  p.activations.assign(static_cast<size_t>(layers), ActivationPlacement::OffloadToHost);
  return p;
}

TEST(PlanDevices, HostStateIsCountedOnceAndEachDevicesShareOfPinnedBuffersOncePerDevice) {
  const ModelConfig config = llama_8b();
  const ModelLayout layout = build_model_layout(config);
  const int64_t chunk_tokens = kSeq, chunks = 16;
  const HostBytes one =
      host_bytes(config, layout, streamed_plan(layout, config.num_layers, 1, 1), chunk_tokens, chunks);
  // Two devices, each with half the step's micro-chunks.
  const HostBytes two =
      host_bytes(config, layout, streamed_plan(layout, config.num_layers, 2, 1), chunk_tokens, chunks / 2);
  EXPECT_EQ(two.pageable, one.pageable);  // masters, m and v: once
  // Offloaded boundaries, token staging and the staging of every unit: the same bytes (each device
  // holds half the boundaries' tokens); the norm partials' readback and the token arrays' rounding
  // once more per device (7.8 MB for 8B parameters); the row-sparse embedding's rows in a buffer of the
  // group's own (one device reuses an offloaded boundary's), sized for the whole step.
  const size_t rows =
      static_cast<size_t>(max_embedding_rows(config, chunk_tokens, chunks) * config.hidden_size) * 2;
  const size_t partials =
      host_unit_norm_partials(layout, streamed_plan(layout, config.num_layers, 1, 1)) * sizeof(double);
  EXPECT_GE(two.pinned, one.pinned + rows + partials);
  EXPECT_LE(two.pinned, one.pinned + rows + partials + (size_t{1} << 20)) << two.pinned - one.pinned - rows;
}

TEST(PlanDevices, CollectivesCostTheirBusBytesAndTheFallbackIsSaidToBeOne) {
  const ModelConfig config = llama_8b();
  MachineProfile profile = nominal_profile(config, kSeq, DType::BF16);
  const CollectiveRate fallback = collective_rate(profile);
  EXPECT_FALSE(fallback.measured);
  EXPECT_EQ(fallback.bus_bytes_per_s, kFallbackBusBytesPerSecond);
  EXPECT_NE(describe_collectives(profile, 2).find("FALLBACK"), std::string::npos);
  EXPECT_TRUE(describe_collectives(profile, 1).empty());
  profile.collective = {400e9, 10e-6, 8};
  const CollectiveRate measured = collective_rate(profile);
  EXPECT_TRUE(measured.measured);
  // 1 GB over 4 devices: an all-reduce moves 2 x 3/4 of it per link, an all-gather 3/4.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 4, measured), 10e-6 + 1.5e9 / 400e9);
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 4, measured), 10e-6 + 0.75e9 / 400e9);
  EXPECT_EQ(all_reduce_seconds(1e9, 1, measured), 0.0);
  EXPECT_NE(describe_collectives(profile, 2).find("measured"), std::string::npos);
}

TEST(PlanDevices, EachDeviceComputesItsShareAndPaysForTheCollectives) {
  const ModelConfig config = llama_8b();
  const ModelLayout layout = build_model_layout(config);
  MachineProfile profile = nominal_profile(config, kSeq, DType::BF16);
  const StepShape whole{kSeq, 16}, half{kSeq, 8};
  const Prediction one =
      predict(config, layout, streamed_plan(layout, config.num_layers, 1, 1), profile, whole);
  const Prediction two =
      predict(config, layout, streamed_plan(layout, config.num_layers, 2, 1), profile, half);
  const int compute = static_cast<int>(Lane::Compute), h2d = static_cast<int>(Lane::HostToDevice);
  // Half the tokens' compute each.
  EXPECT_LT(two.busy[compute], 0.6 * one.busy[compute]);
  // Half of each upload over PCIe per device, the rest gathered: the h2d lane is busy for less.
  EXPECT_LT(two.busy[h2d], one.busy[h2d]);
  // The run's tokens per second count both devices' tokens.
  EXPECT_DOUBLE_EQ(two.tokens_per_second, static_cast<double>(whole.tokens()) / two.step_seconds);
  // Every unit's gradient all-reduce runs on the compute stream: a slower bus adds its time there,
  // 2 x 1/2 x the bf16 gradient's bytes / bus bandwidth per unit and step.
  profile.collective = {1e18, 0.0, 2};
  const Prediction fast =
      predict(config, layout, streamed_plan(layout, config.num_layers, 2, 1), profile, half);
  profile.collective = {10e9, 0.0, 2};
  const Prediction slow =
      predict(config, layout, streamed_plan(layout, config.num_layers, 2, 1), profile, half);
  const double reduce_seconds = static_cast<double>(layout.parameter_count()) * 2.0 / 10e9;
  EXPECT_NEAR(slow.busy[compute] - fast.busy[compute], reduce_seconds, 0.02 * reduce_seconds);
}

}  // namespace
}  // namespace ferry
