// The planner with a lean optimizer_state (optim/state_format.h): the host bytes it counts, the CPU
// AdamW rate it assumes, and the plans it offers -- Llama-3.1-8B in a 56 GiB host, which fp32 state
// cannot fit.
#include <gtest/gtest.h>

#include "core/error.h"
#include "optim/host_array.h"
#include "planner/adamw_rate.h"
#include "planner/memory_model.h"
#include "planner_8b_search_fixture.h"
#include "test_util.h"

namespace ferry::test {
namespace {

TEST(LeanStateMemory, UnitStateBytesFollowTheFormat) {
  // One mapping per state array, whole 4 KiB pages; fp32 is 3 arrays of 4 bytes/param; the block
  // scales are 4 bytes per 64 elements (65536 bytes for 1 Mi elements).
  const size_t n = 1 << 20;
  EXPECT_EQ(state_mapped_bytes(OptimizerStateFormat::Fp32, n), 3 * HostArray::mapped_bytes(n));
  EXPECT_EQ(state_mapped_bytes(OptimizerStateFormat::Bf16SrQ8, n), 2 * n + n + 65536 + n + 65536);
  EXPECT_EQ(state_mapped_bytes(OptimizerStateFormat::Bf16C8Q8, n), 2 * n + n + n + 65536 + n + 65536);
  EXPECT_EQ(state_mapped_bytes(OptimizerStateFormat::Fp32Q8, n), 4 * n + n + 65536 + n + 65536);
}

TEST_F(Llama8BSearchTest, LeanStateShrinksTheHostTotal) {
  const MachineProfile profile = machine(50e9, 5e9);
  PlanRequest r = request(24);
  r.space.per_unit_gpu_optimizer = false;
  const Plan exact = search_plans(config_, layout_, profile, r).best.plan;
  const size_t exact_host = host_bytes(config_, layout_, exact, kSeq, kGlobal).pageable;
  r.optimizer_state = OptimizerStateFormat::Bf16SrQ8;
  const Plan lean = search_plans(config_, layout_, profile, r).best.plan;
  EXPECT_EQ(lean.optimizer_state, OptimizerStateFormat::Bf16SrQ8);
  const size_t lean_host = host_bytes(config_, layout_, lean, kSeq, kGlobal).pageable;
  // 12 against 4.125 bytes/param of 8.03 G parameters.
  const double params = static_cast<double>(layout_.parameter_count());
  EXPECT_NEAR(static_cast<double>(exact_host) / params, 12.0, 0.01);
  EXPECT_NEAR(static_cast<double>(lean_host) / params, 4.125, 0.01);
}

TEST_F(Llama8BSearchTest, LeanStateFitsAHostThatFp32Cannot) {
  const MachineProfile profile = machine(50e9, 5e9);
  PlanRequest r = request(24);
  r.host_budget = 56 * kGiB;
  EXPECT_TRUE(
      throws_with([&] { search_plans(config_, layout_, profile, r); }, {"no plan fits", "host_memory"}));
  for (auto format : {OptimizerStateFormat::Bf16SrQ8, OptimizerStateFormat::Bf16C8Q8}) {
    r.optimizer_state = format;
    const SearchResult result = search_plans(config_, layout_, profile, r);
    EXPECT_LE(result.best.prediction.host.total(), 56 * kGiB) << state_format_name(format);
    // Lean state stays on the host: no GPU AdamW, no fp32 masters uploaded.
    for (UnitPlacement u : result.best.plan.units) EXPECT_NE(u, UnitPlacement::ResidentWithOptimizer);
    EXPECT_EQ(result.best.plan.weight_upload, WeightUpload::HostShadow);
  }
}

TEST_F(Llama8BSearchTest, LeanStateRefusesWhatKeepsFp32State) {
  const MachineProfile profile = machine(50e9, 5e9);
  PlanRequest r = request(24);
  r.optimizer_state = OptimizerStateFormat::Fp32Q8;
  r.weight_upload = WeightUpload::ConvertOnUpload;
  EXPECT_TRUE(throws_with([&] { search_plans(config_, layout_, profile, r); },
                          {"convert-on-upload", "optimizer_state: fp32_q8"}));
  r.weight_upload.reset();
  r.resident_layers = 4;
  r.gpu_optimizer_layers = 2;
  EXPECT_TRUE(throws_with([&] { search_plans(config_, layout_, profile, r); }, {"gpu_optimizer_layers"}));
}

TEST(LeanStateRate, RooflineScaledAndCappedByTheKernel) {
  HostProfile host;
  host.threads = 16;
  host.cpu_adamw_params_per_s = 5e9;
  Plan plan;
  EXPECT_EQ(host_adamw_params_per_s(host, plan), 5e9);
  plan.optimizer_state = OptimizerStateFormat::Bf16SrQ8;
  // A profile without the lean rate. Roofline: 5e9 * 26 / 10.25 = 12.7e9; the kernel: 16 x 260e6.
  EXPECT_DOUBLE_EQ(host_adamw_params_per_s(host, plan), 16 * kLeanAdamWParamsPerThread[3]);
  host.threads = 1000;
  host.cpu_adamw_params_per_s = 1e9;
  EXPECT_DOUBLE_EQ(host_adamw_params_per_s(host, plan), 1e9 * 26.0 / 10.25);
}

TEST(LeanStateRate, MeasuredLeanRateIsTaken) {
  HostProfile host;
  host.threads = 16;
  host.cpu_adamw_params_per_s = 5e9;
  host.lean_adamw_params_per_s[static_cast<int>(OptimizerStateFormat::Bf16C8Q8)] = 3.5e9;
  Plan plan;
  plan.optimizer_state = OptimizerStateFormat::Bf16C8Q8;
  EXPECT_EQ(host_adamw_params_per_s(host, plan), 3.5e9);
  // The fp32 rate is the fp32 pass's, whatever the lean ones.
  plan.optimizer_state = OptimizerStateFormat::Fp32;
  EXPECT_EQ(host_adamw_params_per_s(host, plan), 5e9);
}

}  // namespace
}  // namespace ferry::test
