// The planner's disk tier on the 8B shape: the search puts the fewest layers' state on disk that
// brings a plan under the host budget (spread over the layers), within the disk budget; without a
// disk budget the refusal names the disk_memory that would do; the memory model counts the tier's
// buffers instead of its units' state; the cost model charges the disk's time and says how many
// tokens per step would hide it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/host_array.h"
#include "optim/state_arrays.h"
#include "planner/disk_batch.h"
#include "planner/disk_spill.h"
#include "planner/disk_tier_layout.h"
#include "planner/memory_model.h"
#include "planner/search.h"
#include "planner_8b_search_fixture.h"

namespace ferry {
namespace {

using test::kGiB;

class DiskPlanTest : public test::Llama8BSearchTest {
 protected:
  // PCIe 55 GB/s, a 20 G params/s CPU AdamW (fast, so that the disk is what the tier adds), and a
  // disk of `disk` bytes/s each way.
  MachineProfile with_disk(double disk) const {
    MachineProfile p = machine(55e9, 20e9);
    p.host.disk_read_bytes_per_s = disk;
    p.host.disk_write_bytes_per_s = disk;
    return p;
  }
  size_t host_of(const Candidate& c, const Plan& plan) const {
    return host_bytes(config_, layout_, plan, c.shape.chunk_tokens, c.shape.chunks).total();
  }
  // The host budget of the best all-RAM plan at 24 GiB of GPU, less `short_by`.
  size_t tight_host(size_t short_by) const {
    PlanRequest r = request(24);
    r.host_budget = 0;
    const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), r);
    return ram.best.prediction.host.total() - short_by;
  }
};

TEST_F(DiskPlanTest, DiskLayersAreSpreadOverTheLayers) {
  PlanRequest r = request(24);
  const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), r);
  ASSERT_EQ(ram.best.plan.disk_units(), 0) << "a host budget that holds the state uses no disk";
  Plan p = ram.best.plan;
  p.weight_upload = WeightUpload::HostShadow;
  for (auto& u : p.units) u = UnitPlacement::Streamed;
  const Plan four = with_state_on_disk(layout_, p, 4);
  std::vector<size_t> on_disk;
  for (size_t u = 0; u < four.state_on_disk.size(); ++u)
    if (four.state_on_disk[u]) on_disk.push_back(u);
  // 32 layers (units 1..32), 4 on disk: the middle of each eighth.
  EXPECT_EQ(on_disk, (std::vector<size_t>{5, 13, 21, 29}));
  EXPECT_EQ(four.disk_slots, kDiskSlots);
  EXPECT_EQ(with_state_on_disk(layout_, p, 32).disk_units(), 32);
  EXPECT_EQ(with_state_on_disk(layout_, p, 0).disk_units(), 0);
  // Not with the masters uploaded from RAM.
  Plan converting = p;
  converting.weight_upload = WeightUpload::ConvertOnUpload;
  EXPECT_TRUE(disk_eligible_units(layout_, converting).empty());
}

TEST_F(DiskPlanTest, TheSearchPutsTheFewestLayersOnDiskThatFitTheHost) {
  PlanRequest r = request(24);
  r.host_budget = tight_host(20 * kGiB);
  r.disk_budget = 500 * kGiB;
  const SearchResult s = search_plans(config_, layout_, with_disk(2e9), r);
  const Plan& plan = s.best.plan;
  const int64_t k = plan.disk_units();
  ASSERT_GT(k, 0) << plan.describe();
  EXPECT_LE(s.best.prediction.host.total(), r.host_budget);
  Plan fewer = with_state_on_disk(layout_, plan, k - 1);
  EXPECT_GT(host_of(s.best, fewer), r.host_budget) << "one layer fewer on disk would not fit";
  const DiskTierLayout d = disk_tier_layout(layout_, plan);
  EXPECT_EQ(s.best.prediction.disk_bytes, d.file_bytes);
  // The disk lane reads and writes each disk layer's 12 bytes/param once a step.
  EXPECT_NEAR(s.best.prediction.busy[static_cast<int>(Lane::Disk)],
              2.0 * static_cast<double>(d.file_bytes) / 2e9, 1e-6);
  EXPECT_NE(s.best.prediction.explain().find("disk"), std::string::npos);
}

TEST_F(DiskPlanTest, ADiskBudgetTooSmallIsRefusedWithTheBudgetsThatWork) {
  PlanRequest r = request(24);
  r.host_budget = tight_host(20 * kGiB);
  for (size_t disk : {size_t{0}, size_t{1} << 20}) {
    r.disk_budget = disk;
    try {
      search_plans(config_, layout_, with_disk(2e9), r);
      FAIL() << "expected a refusal";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("disk_memory of at least"), std::string::npos) << m;
      EXPECT_NE(m.find("host_memory of at least"), std::string::npos) << m;
    }
  }
  // A disk budget bounded by the free space under disk_dir (train/plan_selection.h plan_request):
  // the refusal says so, with the smallest disk and host budgets that work.
  r.disk_budget = size_t{1} << 20;
  r.disk_budget_source = "what is free in disk_dir /scratch (disk_memory is 100.00 GiB): free space there";
  try {
    search_plans(config_, layout_, with_disk(2e9), r);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("disk_memory of at least"), std::string::npos) << m;
    EXPECT_NE(m.find("the disk budget is 1.00 MiB, what is free in disk_dir /scratch"), std::string::npos)
        << m;
  }
}

TEST_F(DiskPlanTest, TheMemoryModelCountsTheBuffersNotTheDiskUnitsState) {
  const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), request(24));
  Plan p = ram.best.plan;
  const Plan disk = with_state_on_disk(layout_, p, 8);
  const HostBytes a = host_bytes(config_, layout_, p, kSeq, kGlobal);
  const HostBytes b = host_bytes(config_, layout_, disk, kSeq, kGlobal);
  const DiskTierLayout d = disk_tier_layout(layout_, disk);
  size_t state = 0;
  for (size_t u : d.order) state += 3 * HostArray::mapped_bytes(static_cast<size_t>(layout_.units[u].numel));
  EXPECT_EQ(b.pageable, a.pageable - state + d.slots * d.slot_bytes);
  EXPECT_EQ(b.pinned, a.pinned);
  // Each region holds master, m and v at 4096-byte boundaries, one after another in update order.
  size_t offset = 0;
  for (size_t u : d.order) {
    EXPECT_EQ(d.region_offset[u], offset);
    EXPECT_EQ(d.region_offset[u] % 4096, 0u);
    offset += d.region_bytes[u];
  }
  EXPECT_EQ(d.file_bytes, offset);
}

// The run reads its weights one unit at a time (ModelWeights::deferred): straight into the fp32
// masters of an exact state in RAM, else into one fp32 buffer that the disk tier writes or a lean
// format encodes; the moments of the units in RAM come after the last (HostBytes::start). The
// start is the steady total less those moments plus that buffer, of the largest unit that needs
// it: none in RAM, so the start is below the total; above it where nothing but the buffer is left
// to count (every unit's state on disk, which the search's host budget must then hold).
TEST_F(DiskPlanTest, TheStartHoldsOneUnitsWeightsBesideTheMastersBeforeTheMoments) {
  const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), request(24));
  size_t largest = 0, moments = 0;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout_.units[u].numel);
    largest = std::max(largest, n * sizeof(float));
    if (ram.best.plan.units[u] != UnitPlacement::ResidentWithOptimizer)
      moments += 2 * HostArray::mapped_bytes(n);
  }
  const HostBytes in_ram = host_bytes(config_, layout_, ram.best.plan, kSeq, kGlobal);
  EXPECT_EQ(in_ram.loaded_weights, 0u);
  EXPECT_EQ(in_ram.moments, moments);
  EXPECT_EQ(in_ram.start(), in_ram.total() - moments);
  EXPECT_EQ(in_ram.peak(), in_ram.total());

  Plan lean = ram.best.plan;
  lean.optimizer_state = OptimizerStateFormat::Bf16SrQ8;
  for (auto& placement : lean.units)
    if (placement == UnitPlacement::ResidentWithOptimizer) placement = UnitPlacement::Streamed;
  EXPECT_EQ(host_bytes(config_, layout_, lean, kSeq, kGlobal).loaded_weights, largest);

  Plan all_on_disk = ram.best.plan;
  all_on_disk.state_on_disk.assign(layout_.units.size(), true);
  size_t largest_on_disk = 0;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    if (all_on_disk.units[u] == UnitPlacement::ResidentWithOptimizer)
      all_on_disk.state_on_disk[u] = false;
    else
      largest_on_disk =
          std::max(largest_on_disk, static_cast<size_t>(layout_.units[u].numel) * sizeof(float));
  }
  const HostBytes disk = host_bytes(config_, layout_, all_on_disk, kSeq, kGlobal);
  ASSERT_GT(largest_on_disk, 0u);
  EXPECT_EQ(disk.loaded_weights, largest_on_disk);
  if (disk.moments == 0) {
    EXPECT_EQ(disk.peak(), disk.total() + largest_on_disk);
  } else {
    EXPECT_EQ(disk.peak(), std::max(disk.total(), disk.total() - disk.moments + largest_on_disk));
  }
}

TEST_F(DiskPlanTest, ASlowDiskBoundsTheStepAndSaysHowManyTokensWouldHideIt) {
  const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), request(24));
  const Candidate& c = ram.best;
  Plan p = c.plan;
  p.weight_upload = WeightUpload::HostShadow;
  const Plan disk = with_state_on_disk(layout_, p, 32);  // every layer: 24 bytes/param a step
  const MachineProfile slow = with_disk(0.5e9), fast = with_disk(1e12);
  const Prediction on_slow = predict(config_, layout_, disk, slow, c.shape);
  const Prediction on_fast = predict(config_, layout_, disk, fast, c.shape);
  const Prediction in_ram = predict(config_, layout_, p, slow, c.shape);
  EXPECT_GT(on_slow.step_seconds, 2.0 * in_ram.step_seconds) << on_slow.explain();
  EXPECT_EQ(on_slow.bottleneck, Lane::Disk) << on_slow.explain();
  EXPECT_NEAR(on_fast.step_seconds, in_ram.step_seconds, 0.05 * in_ram.step_seconds) << on_fast.explain();
  // b·F/(6·rate) with the measured compute: the disk's seconds over the compute's seconds per token.
  const int64_t tokens = c.shape.tokens();
  const double hiding = disk_hiding_tokens(layout_, disk, slow, on_slow, tokens);
  const double disk_s = 2.0 * static_cast<double>(disk_tier_layout(layout_, disk).file_bytes) / 0.5e9;
  const double per_token = on_slow.busy[static_cast<int>(Lane::Compute)] / static_cast<double>(tokens);
  EXPECT_EQ(hiding, std::ceil(disk_s / per_token));
  EXPECT_GT(hiding, static_cast<double>(tokens));
  const std::vector<std::string> lines = describe_disk_tier(layout_, disk, slow, on_slow, tokens, 0, true);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("tokens/step"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("raise global_batch"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("disk-bound"), std::string::npos) << lines[2];
  EXPECT_NE(lines[1].find("s of GPU compute"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("24 bytes/param of fp32 state"), std::string::npos) << lines[1];
  // With the sequence length, also as the global_batch that hides it.
  const std::vector<std::string> with_seq =
      describe_disk_tier(layout_, disk, slow, on_slow, tokens, 0, true, 4096);
  const std::string batch = fmt::format("global_batch >= {} at seq_len 4096",
                                        disk_hiding_global_batch(hiding, 4096, disk.micro_batch));
  EXPECT_NE(with_seq[2].find(batch), std::string::npos) << with_seq[2];
  // A fast disk hides: said so, not "disk-bound".
  const std::vector<std::string> hidden = describe_disk_tier(layout_, disk, fast, on_fast, tokens, 0, true);
  ASSERT_EQ(hidden.size(), 3u);
  EXPECT_NE(hidden[2].find("the disk hides"), std::string::npos) << hidden[2];
}

// A disk-bound plan at doubling global batches under the same budgets: each option is the search's
// best plan at that batch, and the list ends where the disk is hidden or nothing fits. More tokens
// per step need not be faster: here (8192-token sequences, a host budget 20 GiB short) each doubling
// offloads more boundaries, puts more layers' state on disk and lowers the tokens/s -- why the list
// is the search's answers and not the hiding-token rule of thumb.
TEST_F(DiskPlanTest, LargerStepsUnderTheSameBudgetsAreListedUntilTheDiskHidesOrNothingFits) {
  PlanRequest r = request(24);
  r.host_budget = tight_host(20 * kGiB);
  r.disk_budget = 500 * kGiB;
  r.keep_every = 1;  // every boundary kept: recomputing some would leave less state on disk
  const MachineProfile profile = with_disk(2e9);
  const SearchResult base = search_plans(config_, layout_, profile, r);
  ASSERT_EQ(base.best.prediction.bottleneck, Lane::Disk) << base.best.prediction.explain();
  const std::vector<DiskBatchOption> options = disk_batch_options(config_, layout_, profile, r, 3);
  ASSERT_FALSE(options.empty());
  EXPECT_LE(options.size(), 3u);
  int64_t batch = r.global_batch;
  for (size_t i = 0; i < options.size(); ++i) {
    const DiskBatchOption& o = options[i];
    batch *= 2;
    EXPECT_EQ(o.global_batch, batch);
    if (!o.fits) {
      EXPECT_EQ(i + 1, options.size()) << "nothing larger is tried";
      continue;
    }
    PlanRequest at = r;
    at.global_batch = batch;
    const SearchResult s = search_plans(config_, layout_, profile, at, 0);
    EXPECT_EQ(o.step_seconds, s.best.prediction.step_seconds);
    EXPECT_EQ(o.disk_layers, s.best.plan.disk_units());
    EXPECT_EQ(o.tokens_per_second, s.best.prediction.tokens_per_second);
    if (!o.disk_bound) {
      EXPECT_EQ(i + 1, options.size()) << "the disk is hidden: the list ends";
    }
  }
  const std::vector<std::string> lines = describe_disk_batch_options(options, kSeq);
  ASSERT_EQ(lines.size(), options.size());
  EXPECT_NE(lines[0].find(fmt::format("global_batch {} (", 2 * r.global_batch)), std::string::npos)
      << lines[0];
  r.disk_budget = 0;
  EXPECT_TRUE(disk_batch_options(config_, layout_, profile, r).empty()) << "no disk tier, nothing to say";
}

TEST(DiskHidingGlobalBatch, RoundsUpToWholeSequencesAndMicroBatches) {
  EXPECT_EQ(disk_hiding_global_batch(235028, 2048, 2), 116);  // 114.76 sequences → 115 → 116
  EXPECT_EQ(disk_hiding_global_batch(235028, 2048, 1), 115);
  EXPECT_EQ(disk_hiding_global_batch(4096, 2048, 1), 2);
  EXPECT_EQ(disk_hiding_global_batch(4097, 2048, 4), 4);
  EXPECT_EQ(disk_hiding_global_batch(0, 2048, 1), 0);
  EXPECT_EQ(disk_hiding_global_batch(1000, 0, 1), 0);
}

// A lean format's arrays go to disk as they are: each at a 4096-byte boundary of its region (an
// 8-bit moment's scales are numel/16 bytes), the disk traffic is the format's bytes and not fp32's,
// and the memory model drops the format's mappings for the disk units.
TEST_F(DiskPlanTest, ALeanFormatsArraysAreAlignedAndCountedAtTheirBytes) {
  PlanRequest r = request(24);
  r.optimizer_state = OptimizerStateFormat::Bf16SrQ8;
  const SearchResult ram = search_plans(config_, layout_, with_disk(2e9), r);
  Plan p = ram.best.plan;
  ASSERT_EQ(p.optimizer_state, OptimizerStateFormat::Bf16SrQ8);
  const Plan disk = with_state_on_disk(layout_, p, 4);
  const DiskTierLayout d = disk_tier_layout(layout_, disk);
  ASSERT_EQ(d.order.size(), 4u);
  size_t state = 0;
  for (size_t u : d.order) {
    const size_t n = static_cast<size_t>(layout_.units[u].numel);
    EXPECT_EQ(d.array_bytes[u], unit_state_array_bytes(OptimizerStateFormat::Bf16SrQ8, n));
    ASSERT_EQ(d.array_offset[u].size(), 5u);
    for (size_t off : d.array_offset[u]) EXPECT_EQ(off % 4096, 0u);
    EXPECT_EQ(d.region_bytes[u] % 4096, 0u);
    EXPECT_GE(d.region_bytes[u], state_bytes(OptimizerStateFormat::Bf16SrQ8, n));
    EXPECT_LT(d.region_bytes[u], state_bytes(OptimizerStateFormat::Bf16SrQ8, n) + 5 * 4096);
    state += state_mapped_bytes(OptimizerStateFormat::Bf16SrQ8, n);
  }
  const HostBytes a = host_bytes(config_, layout_, p, kSeq, kGlobal);
  const HostBytes b = host_bytes(config_, layout_, disk, kSeq, kGlobal);
  EXPECT_EQ(b.pageable, a.pageable - state + d.ram_bytes());
  const Prediction on_disk = predict(config_, layout_, disk, with_disk(2e9), ram.best.shape);
  EXPECT_NEAR(on_disk.busy[static_cast<int>(Lane::Disk)], 2.0 * static_cast<double>(d.file_bytes) / 2e9,
              1e-6);
  const Plan fp32 = [&] {
    Plan q = disk;
    q.optimizer_state = OptimizerStateFormat::Fp32;
    return q;
  }();
  EXPECT_LT(static_cast<double>(d.file_bytes),
            0.36 * static_cast<double>(disk_tier_layout(layout_, fp32).file_bytes))
      << "4.125 bytes/param against 12";
}

// Updates during the backward take the disk units in landing order (the last layer first): the
// tier reads them in that order too, and each crosses the disk once each way a step.
TEST_F(DiskPlanTest, UpdatesDuringTheBackwardReadTheDiskInLandingOrder) {
  PlanRequest r = request(24);
  r.clipping = false;
  r.update = UpdateSchedule::DuringBackward;
  r.disk_budget = 500 * kGiB;
  r.disk_layers = 5;
  const SearchResult s = search_plans(config_, layout_, with_disk(2e9), r);
  ASSERT_EQ(s.best.plan.update, UpdateSchedule::DuringBackward);
  const DiskTierLayout d = disk_tier_layout(layout_, s.best.plan);
  ASSERT_EQ(d.order.size(), 5u);
  EXPECT_TRUE(std::is_sorted(d.order.rbegin(), d.order.rend()));
  EXPECT_NEAR(s.best.prediction.busy[static_cast<int>(Lane::Disk)],
              2.0 * static_cast<double>(d.file_bytes) / 2e9, 1e-6);
}

TEST_F(DiskPlanTest, DiskLayersCanBeForced) {
  PlanRequest r = request(24);
  r.disk_budget = 500 * kGiB;
  r.disk_layers = 3;
  const SearchResult s = search_plans(config_, layout_, with_disk(2e9), r);
  EXPECT_EQ(s.best.plan.disk_units(), 3);
  r.disk_budget = 0;
  EXPECT_THROW(search_plans(config_, layout_, with_disk(2e9), r), Error);
}

}  // namespace
}  // namespace ferry
