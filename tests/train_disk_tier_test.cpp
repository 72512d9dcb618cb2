// The disk tier on the simulated device with a real file: a plan that keeps some layers'
// optimizer state on disk must give the bits of the plain in-memory trainer (losses, norms, and
// the masters, m and v of every unit), whatever the update schedule, the number of RAM buffers
// and which layers are on disk; the state reads back for checkpoints and resumes exactly; the
// file is gone when the engine is.
#include <cstring>
#include <filesystem>
#include <span>

#include "device/device.h"
#include "engine/disk_state_tier.h"
#include "engine/model_step.h"
#include "engine/sliding_engine.h"
#include "engine/unit_optimizer.h"
#include "ops/device_ops.h"
#include "optim/state_arrays.h"
#include "planner/memory_model.h"
#include "sliding_plans.h"
#include "sliding_runs.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::batch_for;
using test::hyper_at;
using test::kGlobal;
using test::kMicro;
using test::kSeq;
using test::kSteps;
using test::make_plan;
using test::make_rows;

using State = test::PlainState;

// The plain trainer's state after `steps` steps from the engine runs' initial weights (seed 9).
State plain_state(const ModelConfig& config, const std::vector<PackedRow>& rows, double max_norm,
                  int64_t steps) {
  return test::plain_state(config, 9, rows, max_norm, steps);
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span(v));
}

void put_state(UnitUpdater& host, size_t u, const std::vector<float>& master, const std::vector<float>& m,
               const std::vector<float>& v) {
  host.copy_state_in(u, {bytes_of(master), bytes_of(m), bytes_of(v)});
}

State read_state(UnitUpdater& host, const ModelLayout& layout) {
  State s;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = static_cast<size_t>(layout.units[u].numel);
    s.masters.emplace_back(n);
    s.m.emplace_back(n);
    s.v.emplace_back(n);
    host.copy_state_out(
        u, {std::as_writable_bytes(std::span(s.masters.back())),
            std::as_writable_bytes(std::span(s.m.back())), std::as_writable_bytes(std::span(s.v.back()))});
  }
  return s;
}

void expect_same_state(const State& actual, const State& expected) {
  ASSERT_EQ(actual.masters.size(), expected.masters.size());
  for (size_t u = 0; u < expected.masters.size(); ++u) {
    EXPECT_EQ(actual.masters[u], expected.masters[u]) << "master of unit " << u;
    EXPECT_EQ(actual.m[u], expected.m[u]) << "m of unit " << u;
    EXPECT_EQ(actual.v[u], expected.v[u]) << "v of unit " << u;
  }
}

Plan on_disk(Plan p, std::vector<size_t> units, int64_t slots, const fs::path& dir) {
  p.state_on_disk.assign(p.units.size(), false);
  for (size_t u : units) p.state_on_disk[u] = true;
  p.disk_slots = slots;
  p.disk_dir = dir.string();
  return p;
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["num_hidden_layers"] = 4;
    config_ = parse_model_config(json, "test");
    layout_ = build_model_layout(config_);
    rows_ = make_rows(config_.vocab_size, 5);
  }

  // Runs `steps` steps from the initial weights (or, with `from`, from that state at step
  // `first`) and returns the losses, norms and the whole state read back.
  State run(const Plan& plan, double max_norm, int64_t first = 0, const State* from = nullptr) {
    std::vector<std::vector<float>> init;
    init_random_weights(config_, 9, init);
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      const std::vector<float> zeros(init[u].size(), 0.0f);
      if (from)
        put_state(engine.host(), u, from->masters[u], from->m[u], from->v[u]);
      else
        put_state(engine.host(), u, init[u], zeros, zeros);
    }
    engine.weights_changed(first);
    std::vector<double> losses, norms;
    for (int64_t s = first; s < kSteps; ++s) {
      const SlidingStepResult r = engine.step(s + 1, batch_for(rows_, s), hyper_at(s), max_norm);
      losses.push_back(r.loss);
      norms.push_back(r.grad_norm);
    }
    engine.finish_updates();
    State state = read_state(engine.host(), layout_);
    state.losses = losses;
    state.norms = norms;
    if (plan.disk_units() > 0) {
      EXPECT_TRUE(engine.host().disk() != nullptr);
      EXPECT_TRUE(fs::exists(engine.host().disk()->path()));
      file_ = engine.host().disk()->path();
    }
    return state;
  }

  void expect_identical(const State& actual, const State& expected) {
    EXPECT_EQ(actual.losses, expected.losses);
    EXPECT_EQ(actual.norms, expected.norms);
    expect_same_state(actual, expected);
  }

  ModelConfig config_;
  ModelLayout layout_;
  std::vector<PackedRow> rows_;
  fs::path file_;
};

TEST_F(DiskTierTest, AfterBackwardWithClippingIsBitIdenticalToTheAllRamRun) {
  test::ScratchDir dir("disk-tier");
  const State reference = plain_state(config_, rows_, 0.5, kSteps);
  const Plan ram = make_plan(layout_, 4, 2, {}, {1}, UpdateSchedule::AfterBackward);
  expect_identical(run(ram, 0.5), reference);
  for (int64_t slots : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << slots << " RAM buffers");
    expect_identical(run(on_disk(ram, {2, 3}, slots, dir.path()), 0.5), reference);
    EXPECT_FALSE(fs::exists(file_)) << "the state file goes with the engine";
  }
  // Every layer on disk, more buffers than disk units.
  expect_identical(run(on_disk(ram, {1, 2, 3, 4}, 3, dir.path()), 0.5), reference);
  expect_identical(run(on_disk(ram, {3}, 3, dir.path()), 0.5), reference);
}

TEST_F(DiskTierTest, DuringBackwardIsBitIdenticalToTheAllRamRun) {
  test::ScratchDir dir("disk-tier");
  const State reference = plain_state(config_, rows_, 0.0, kSteps);
  const Plan ram = make_plan(layout_, 4, 2, {}, {3}, UpdateSchedule::DuringBackward);
  for (int64_t slots : {1, 2, 3})
    expect_identical(run(on_disk(ram, {1, 3, 4}, slots, dir.path()), 0.0), reference);
  // With resident layers beside the disk ones.
  const Plan resident = make_plan(layout_, 4, 2, {2, 4}, {}, UpdateSchedule::DuringBackward);
  expect_identical(run(on_disk(resident, {2, 3}, 2, dir.path()), 0.0), reference);
}

TEST_F(DiskTierTest, CheckpointStateAndResumeAreExact) {
  test::ScratchDir dir("disk-tier");
  const State reference = plain_state(config_, rows_, 0.5, kSteps);
  const State at2 = plain_state(config_, rows_, 0.5, 2);
  const Plan plan =
      on_disk(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), {1, 2, 4}, 2, dir.path());
  // What a checkpoint after step 2 reads is the plain trainer's state.
  {
    std::vector<std::vector<float>> init;
    init_random_weights(config_, 9, init);
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      const std::vector<float> zeros(init[u].size(), 0.0f);
      put_state(engine.host(), u, init[u], zeros, zeros);
    }
    engine.weights_changed(0);
    for (int64_t s = 0; s < 2; ++s) engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
    engine.finish_updates();
    expect_same_state(read_state(engine.host(), layout_), at2);
    // Reading the state between steps does not disturb the next steps.
    for (int64_t s = 2; s < kSteps; ++s) {
      const SlidingStepResult r = engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
      EXPECT_EQ(r.loss, reference.losses[static_cast<size_t>(s)]);
    }
    engine.finish_updates();
    expect_same_state(read_state(engine.host(), layout_), reference);
  }
  // Resumed from that state, the last steps give the reference's bits.
  State resumed = run(plan, 0.5, 2, &at2);
  EXPECT_EQ(resumed.losses, std::vector<double>(reference.losses.begin() + 2, reference.losses.end()));
  EXPECT_EQ(resumed.norms, std::vector<double>(reference.norms.begin() + 2, reference.norms.end()));
  expect_same_state(resumed, reference);
}

// Loading the weights (assign_masters, as `ferry train` does) writes each disk unit's first state
// through the tier's slots in turn without reading the file, and converts its staging weights
// then, so that nothing is read before the first step's reads ahead: the run is the plain
// trainer's, bit for bit, with 1 to 3 slots.
TEST_F(DiskTierTest, LoadingTheWeightsWritesTheStateWithoutReadingIt) {
  test::ScratchDir dir("disk-tier");
  const State reference = plain_state(config_, rows_, 0.5, kSteps);
  const Plan ram = make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward);
  for (int64_t slots : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << slots << " RAM buffers");
    std::vector<std::vector<float>> init;
    init_random_weights(config_, 9, init);
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, on_disk(ram, {1, 2, 4}, slots, dir.path()),
                         kMicro * kSeq, kGlobal / kMicro, false);
    for (size_t u = 0; u < layout_.units.size(); ++u) engine.host().assign_masters(u, init[u]);
    engine.weights_changed(0);
    EXPECT_EQ(engine.host().disk()->region_reads(), 0u);
    State state;
    for (int64_t s = 0; s < kSteps; ++s) {
      const SlidingStepResult r = engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
      state.losses.push_back(r.loss);
      state.norms.push_back(r.grad_norm);
    }
    engine.finish_updates();
    const State read = read_state(engine.host(), layout_);
    state.masters = read.masters;
    state.m = read.m;
    state.v = read.v;
    expect_identical(state, reference);
  }
}

// A resume overwrites each disk unit's arrays whole (train/checkpoint.h StreamedState::fresh_arrays):
// through UnitUpdater::disk_state_new they are not read first, the staging weights come from them,
// and the resumed steps read nothing before their own reads ahead; the last steps give the plain
// trainer's bits.
TEST_F(DiskTierTest, AResumeWritesTheStateWithoutReadingIt) {
  test::ScratchDir dir("disk-tier");
  const State reference = plain_state(config_, rows_, 0.5, kSteps);
  const State at2 = plain_state(config_, rows_, 0.5, 2);
  const Plan plan =
      on_disk(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), {1, 2, 4}, 2, dir.path());
  auto device = make_sim_device({});
  auto ops = make_device_ops(*device);
  SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
  UnitUpdater& host = engine.host();
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    if (!host.on_disk(u)) {
      put_state(host, u, at2.masters[u], at2.m[u], at2.v[u]);
      continue;
    }
    const std::vector<std::span<std::byte>> arrays = host.disk_state_new(u);
    ASSERT_EQ(arrays.size(), 3u);
    const std::vector<float>* from[3] = {&at2.masters[u], &at2.m[u], &at2.v[u]};
    for (size_t k = 0; k < 3; ++k) std::memcpy(arrays[k].data(), from[k]->data(), arrays[k].size());
    host.disk_state_written(u);
  }
  engine.weights_changed(2);
  EXPECT_EQ(host.disk()->region_reads(), 0u);
  std::vector<double> losses;
  for (int64_t s = 2; s < kSteps; ++s)
    losses.push_back(engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5).loss);
  engine.finish_updates();
  EXPECT_EQ(losses, std::vector<double>(reference.losses.begin() + 2, reference.losses.end()));
  expect_same_state(read_state(host, layout_), reference);
}

// A new tier's file holds nothing yet: the worker's polls before the state is written read
// nothing ahead (it would read unwritten regions into the slots the state is then written through).
TEST_F(DiskTierTest, ANewTierReadsNothingAheadBeforeItsStateIsWritten) {
  test::ScratchDir dir("disk-tier");
  const Plan plan =
      on_disk(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), {1, 2, 4}, 2, dir.path());
  DiskStateTier tier(layout_, plan);
  tier.poll();
  tier.poll();
  EXPECT_EQ(tier.region_reads(), 0u);
  for (size_t u : tier.layout().order) {
    tier.page_new(u);
    tier.store_new(u);
  }
  tier.poll();
  EXPECT_EQ(tier.region_reads(), 0u);
  // The first acquire reads its unit and the ones after it ahead, as every step does.
  tier.acquire(tier.layout().order[0]);
  EXPECT_EQ(tier.region_reads(), 2u);
  tier.release(tier.layout().order[0]);
  tier.flush();
}

// A read ahead that a write-back in flight holds back is issued by the next poll once that write
// has completed, so the next round's first unit is in RAM when it is acquired. (Whether a real
// write-back completes before a step's first update is the disk's speed against the step's: here
// flush() completes them, so that the test does not depend on either.)
TEST_F(DiskTierTest, APollIssuesTheReadsAWriteBackHeldBack) {
  test::ScratchDir dir("disk-tier");
  const Plan plan =
      on_disk(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), {1, 2, 4}, 2, dir.path());
  DiskStateTier tier(layout_, plan);
  const std::vector<size_t> order = tier.layout().order;
  ASSERT_EQ(order.size(), 3u);
  for (size_t u : order) {
    tier.page_new(u);
    tier.store_new(u);
  }
  // A round, each write-back completed before the next acquire: each acquire finds its read
  // issued ahead but the first's.
  for (size_t u : order) {
    tier.acquire(u);
    tier.release(u);
    if (u != order.back()) tier.flush();
  }
  EXPECT_EQ(tier.unready_acquires(), 1u);
  // The last release may not have read the next round's first unit ahead (its slot's write-back,
  // or the unit's own, may have been in flight); once they have completed, a poll reads it (or
  // finds it read), and the next round's first acquire finds it ready.
  tier.flush();
  tier.poll();
  tier.acquire(order[0]);
  tier.release(order[0]);
  EXPECT_EQ(tier.unready_acquires(), 1u) << "the polled read was ready for the next round's first unit";
  tier.flush();
}

// The memory model is the truth with a disk tier too: the pinned memory is what it says, and the
// pageable memory is the RAM units' state plus the tier's buffers.
TEST_F(DiskTierTest, AllocatesWhatTheMemoryModelSays) {
  test::ScratchDir dir("disk-tier");
  const Plan plan =
      on_disk(make_plan(layout_, 4, 2, {4}, {0}, UpdateSchedule::AfterBackward), {1, 3}, 3, dir.path());
  auto device = make_sim_device({});
  auto ops = make_device_ops(*device);
  SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
  const HostBytes h = host_bytes(config_, layout_, plan, kMicro * kSeq, kGlobal / kMicro);
  EXPECT_EQ(device->pinned_memory().in_use, h.pinned);
  size_t pageable = 0;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    EXPECT_EQ(engine.host().on_disk(u), u == 1 || u == 3);
    pageable += 3 * HostArray::mapped_bytes(engine.host().unit(u).master.size());
  }
  const DiskTierLayout& d = engine.host().disk()->layout();
  pageable += HostArray::mapped_bytes(d.ram_bytes() / sizeof(float));
  EXPECT_EQ(pageable, h.pageable);
  EXPECT_EQ(fs::file_size(engine.host().disk()->path()), d.file_bytes);
}

// A lean format's arrays on disk (opaque bytes, each padded for O_DIRECT): the same losses, norms
// and state bytes as the same lean plan all in RAM, in both update schedules, with the masters
// loaded (encoded) through the tier.
TEST_F(DiskTierTest, ALeanFormatOnDiskIsBitIdenticalToItInRam) {
  test::ScratchDir dir("disk-tier");
  struct LeanRun {
    std::vector<double> losses, norms;
    std::vector<std::vector<std::vector<std::byte>>> arrays;  // per unit, per array
  };
  const auto run_lean = [&](const Plan& plan, double max_norm) {
    std::vector<std::vector<float>> init;
    init_random_weights(config_, 9, init);
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    for (size_t u = 0; u < layout_.units.size(); ++u) engine.host().assign_masters(u, init[u]);
    engine.weights_changed(0);
    LeanRun r;
    for (int64_t s = 0; s < kSteps; ++s) {
      const SlidingStepResult step = engine.step(s + 1, batch_for(rows_, s), hyper_at(s), max_norm);
      r.losses.push_back(step.loss);
      r.norms.push_back(step.grad_norm);
    }
    engine.finish_updates();
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      r.arrays.emplace_back();
      std::vector<std::span<std::byte>> spans;
      for (size_t bytes :
           unit_state_array_bytes(plan.optimizer_state, static_cast<size_t>(layout_.units[u].numel)))
        r.arrays.back().emplace_back(bytes);
      for (auto& a : r.arrays.back()) spans.emplace_back(a);
      engine.host().copy_state_out(u, spans);
    }
    EXPECT_EQ(engine.host().disk() != nullptr, plan.disk_units() > 0);
    return r;
  };
  for (const UpdateSchedule schedule : {UpdateSchedule::AfterBackward, UpdateSchedule::DuringBackward}) {
    SCOPED_TRACE(static_cast<int>(schedule));
    const double max_norm = schedule == UpdateSchedule::AfterBackward ? 0.5 : 0.0;
    Plan ram = make_plan(layout_, 4, 2, {}, {}, schedule);
    ram.optimizer_state = OptimizerStateFormat::Bf16C8Q8;
    ram.state_seed = 11;
    const LeanRun in_ram = run_lean(ram, max_norm);
    const LeanRun on_file = run_lean(on_disk(ram, {1, 3, 4}, 2, dir.path()), max_norm);
    EXPECT_EQ(on_file.losses, in_ram.losses);
    EXPECT_EQ(on_file.norms, in_ram.norms);
    EXPECT_TRUE(on_file.arrays == in_ram.arrays) << "the lean state's bytes";
  }
}

TEST_F(DiskTierTest, RefusesUnitsItCannotHold) {
  test::ScratchDir dir("disk-tier");
  const Plan base = make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward);
  auto device = make_sim_device({});
  auto ops = make_device_ops(*device);
  auto message = [&](const Plan& plan) -> std::string {
    try {
      SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  };
  EXPECT_NE(message(on_disk(base, {0}, 2, dir.path())).find("decoder layers only"), std::string::npos);
  EXPECT_NE(message(on_disk(base, {1}, 2, "")).find("set disk_dir"), std::string::npos);
  Plan converting = on_disk(base, {1}, 2, dir.path());
  converting.weight_upload = WeightUpload::ConvertOnUpload;
  EXPECT_NE(message(converting).find("host-shadow"), std::string::npos);
}

}  // namespace
}  // namespace ferry
