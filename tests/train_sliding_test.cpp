// The sliding engine on the simulated device against the plain in-memory trainer: for every plan
// (slots, resident units, activation placement, update schedule, clipping) the losses, gradient
// norms and final fp32 masters must be bit-identical over several steps.
#include <algorithm>
#include <cstring>
#include <random>

#include "core/error.h"
#include "counting_document.h"
#include "data/packing.h"
#include "device/device.h"
#include "device/trace/tracer.h"
#include "engine/model_step.h"
#include "engine/sliding_engine.h"
#include "engine/unit_optimizer.h"
#include "engine/unit_updater.h"
#include "ops/device_ops.h"
#include "optim/lr_schedule.h"
#include "packed_batch.h"
#include "planner/memory_model.h"
#include "planner/nominal_profile.h"
#include "planner/search.h"
#include "schedule_recorder.h"
#include "sliding_plans.h"
#include "sliding_runs.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

using test::all_units;
using test::batch_for;
using test::converting_on_upload;
using test::counting_document;
using test::hyper_at;
using test::keeping_every;
using test::keeping_internals;
using test::keeping_more;
using test::kGlobal;
using test::kMicro;
using test::kSeq;
using test::kSteps;
using test::make_plan;
using test::make_rows;
using test::offloading_internals;

using test::plain_run;
using test::plain_state;
using test::PlainState;
using test::RunResult;
using test::sliding_run;

// The plain trainer's evaluation of `batch` after 0..kSteps steps (ModelStep::evaluate).
std::vector<double> plain_evals(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                                double max_norm, const StepBatch& batch) {
  std::vector<double> evals;
  const ModelLayout layout = build_model_layout(config);
  auto ops = make_cpu_ops();
  ModelStep step(config, layout, *ops, kMicro * kSeq, kGlobal / kMicro);
  for (int64_t s = 0; s <= kSteps; ++s) {
    PlainState state = plain_state(config, seed, rows, max_norm, s);
    std::vector<float*> p;
    for (auto& u : state.masters) p.push_back(u.data());
    evals.push_back(step.evaluate(p, batch).loss_sum);
  }
  return evals;
}

// sliding_run with an evaluation of `batch` before the first step and after each: the steps must
// not change, and each evaluation must give the plain trainer's bits.
RunResult sliding_run_evaluating(const ModelConfig& config, uint64_t seed, const std::vector<PackedRow>& rows,
                                 double max_norm, const Plan& plan, const StepBatch& batch,
                                 std::vector<double>* evals) {
  std::vector<std::vector<float>> units;
  init_random_weights(config, seed, units);
  const ModelLayout layout = build_model_layout(config);
  auto device = make_sim_device({});
  auto ops = make_device_ops(*device);
  SlidingEngine engine(config, layout, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
  for (size_t u = 0; u < units.size(); ++u) engine.host().unit(u).master.assign(units[u]);
  engine.weights_changed(0);
  RunResult run;
  evals->push_back(engine.evaluate(batch).loss_sum);
  for (int64_t s = 0; s < kSteps; ++s) {
    const SlidingStepResult r = engine.step(s + 1, batch_for(rows, s), hyper_at(s), max_norm);
    run.losses.push_back(r.loss);
    run.norms.push_back(r.grad_norm);
    evals->push_back(engine.evaluate(batch).loss_sum);
  }
  engine.finish_updates();
  for (size_t u = 0; u < units.size(); ++u) {
    const HostArray& master = engine.host().unit(u).master;
    run.masters.emplace_back(master.data(), master.data() + master.size());
  }
  return run;
}

// The engine's masters set to init_random_weights(config, seed), as the weights of step 0.
void assign_random_weights(SlidingEngine& engine, const ModelConfig& config, uint64_t seed) {
  std::vector<std::vector<float>> weights;
  init_random_weights(config, seed, weights);
  for (size_t u = 0; u < weights.size(); ++u) engine.host().unit(u).master.assign(weights[u]);
  engine.weights_changed(0);
}

void expect_identical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(a.losses[i], b.losses[i]) << "loss of step " << i + 1;
    EXPECT_EQ(a.norms[i], b.norms[i]) << "grad norm of step " << i + 1;
  }
  ASSERT_EQ(a.masters.size(), b.masters.size());
  for (size_t u = 0; u < a.masters.size(); ++u)
    EXPECT_EQ(0, std::memcmp(a.masters[u].data(), b.masters[u].data(), a.masters[u].size() * 4))
        << "unit " << u;
}

// The plain trainer's whole optimizer state after `steps` steps.
::testing::AssertionResult same_bits(const HostArray& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return ::testing::AssertionFailure() << "sizes differ";
  if (std::memcmp(actual.data(), expected.data(), expected.size() * 4) != 0)
    return ::testing::AssertionFailure() << "contents differ";
  return ::testing::AssertionSuccess();
}

class SlidingEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["num_hidden_layers"] = 4;
    config_ = parse_model_config(json, "test");
    layout_ = build_model_layout(config_);
    rows_ = make_rows(config_.vocab_size, 5);
    reference_ = plain_run(config_, 9, rows_, 0.5);
  }
  ModelConfig config_;
  ModelLayout layout_;
  std::vector<PackedRow> rows_;
  RunResult reference_;
};

TEST_F(SlidingEngineTest, TwoSlotsEverythingStreamed) {
  expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5,
                                           make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward)));
}

TEST_F(SlidingEngineTest, ThreeSlotsAllActivationsOffloaded) {
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               make_plan(layout_, 4, 3, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward)));
}

TEST_F(SlidingEngineTest, OneSlotMixedActivations) {
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               make_plan(layout_, 4, 1, {}, {0, 2}, UpdateSchedule::AfterBackward)));
}

TEST_F(SlidingEngineTest, ResidentUnitsAndSlowPcie) {
  SimDeviceOptions slow;
  slow.h2d_bytes_per_second = 2e9;
  slow.d2h_bytes_per_second = 2e9;
  slow.copy_latency_seconds = 20e-6;
  expect_identical(
      reference_,
      sliding_run(config_, 9, rows_, 0.5,
                  make_plan(layout_, 4, 2, {0, 3, 4, 5}, {1}, UpdateSchedule::AfterBackward), slow));
}

TEST_F(SlidingEngineTest, EverythingResident) {
  expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5,
                                           make_plan(layout_, 4, 2, {0, 1, 2, 3, 4, 5}, {},
                                                     UpdateSchedule::AfterBackward)));
}

TEST_F(SlidingEngineTest, UpdatesDuringBackwardWithoutClipping) {
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(plain, sliding_run(config_, 9, rows_, 0.0,
                                      make_plan(layout_, 4, 2, {}, {3}, UpdateSchedule::DuringBackward)));
  expect_identical(plain, sliding_run(config_, 9, rows_, 0.0,
                                      make_plan(layout_, 4, 3, {2}, {}, UpdateSchedule::AfterBackward)));
}

// Sweeps (Plan::sweeps): the step's three micro-chunks run forward and backward through the whole
// resident model in three sweeps of one, or two sweeps of two and one, the gradients summed across
// them on the device: the plain trainer's bits, with host- and device-updated units, kept
// internals, recomputed boundaries, everything on the device, and both update schedules.
TEST_F(SlidingEngineTest, SweepsOfTheStepsMicroChunksGiveTheSameBits) {
  using test::in_sweeps;
  const std::vector<size_t> everything = all_units(layout_);
  for (int64_t sweeps : {2, 3}) {
    SCOPED_TRACE("sweeps " + std::to_string(sweeps));
    const std::vector<Plan> plans = {
        in_sweeps(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward), sweeps),
        in_sweeps(make_plan(layout_, 4, 2, {0, 3, 4, 5}, {}, UpdateSchedule::AfterBackward, {1, 2}), sweeps),
        in_sweeps(keeping_internals(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward),
                                    {1, 3}),
                  sweeps),
        in_sweeps(keeping_every(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward), 2),
                  sweeps),
        in_sweeps(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, everything), sweeps),
    };
    for (const Plan& plan : plans) {
      SCOPED_TRACE(plan.describe());
      expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan));
    }
    const RunResult plain = plain_run(config_, 9, rows_, 0.0);
    expect_identical(plain, sliding_run(config_, 9, rows_, 0.0,
                                        in_sweeps(make_plan(layout_, 4, 2, {0, 1, 4, 5}, {},
                                                            UpdateSchedule::DuringBackward, {2, 3}),
                                                  sweeps)));
  }
}

// A plan in sweeps that streams a unit, offloads a boundary, or asks for no sweep at all is refused
// before anything is allocated, saying why.
TEST_F(SlidingEngineTest, SweepsNeedEveryUnitResidentAndEveryBoundaryOnTheDevice) {
  using test::in_sweeps;
  const std::vector<size_t> everything = all_units(layout_);
  const auto refusal = [&](const Plan& plan) {
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    try {
      SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string streamed =
      refusal(in_sweeps(make_plan(layout_, 4, 2, {0, 1, 2, 3, 5}, {}, UpdateSchedule::AfterBackward), 3));
  EXPECT_NE(streamed.find("keeps every unit resident"), std::string::npos) << streamed;
  const std::string offloaded =
      refusal(in_sweeps(make_plan(layout_, 4, 2, everything, {1}, UpdateSchedule::AfterBackward), 3));
  EXPECT_NE(offloaded.find("every boundary activation on the GPU"), std::string::npos) << offloaded;
  const std::string none =
      refusal(in_sweeps(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward), 0));
  EXPECT_NE(none.find("at least 1"), std::string::npos) << none;
  // (Not about sweeps: kept internals beside recomputed boundaries are refused as well.)
  const std::string mixed = refusal(keeping_internals(
      keeping_every(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), 2), {3}));
  EXPECT_NE(mixed.find("one or the other"), std::string::npos) << mixed;
}

// Sequence tiles (model/decoder_layer.h) inside each micro-chunk of 64 tokens of packed documents:
// one-token tiles, tiles that do not divide the chunk, the whole chunk, and longer ones give the
// untiled plain trainer's bits, with offloaded boundaries, resident units and both schedules.
TEST_F(SlidingEngineTest, SequenceTilesGiveTheUntiledBits) {
  for (int64_t tile : {1, 7, 64, 100}) {
    SCOPED_TRACE("seq_tile " + std::to_string(tile));
    Plan plan = make_plan(layout_, 4, 2, {0, 5}, {1, 2}, UpdateSchedule::AfterBackward);
    plan.seq_tile = tile;
    expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan));
  }
  Plan during = make_plan(layout_, 4, 3, {}, {0}, UpdateSchedule::DuringBackward);
  during.seq_tile = 24;
  expect_identical(plain_run(config_, 9, rows_, 0.0), sliding_run(config_, 9, rows_, 0.0, during));
}

// Every K-th boundary kept (on the GPU or the host), the others recomputed in the backward from
// their group's kept one: the same forwards on the same inputs, so the plain trainer's losses, norms
// and masters bit for bit -- for K that divides the 4 layers and K that does not (3: groups {0..2},
// {3}; 5: one group), with one slot (every recomputed layer uploaded again for its backward) and
// more, tiled and untiled, with resident and device-updated units, and both update schedules.
TEST_F(SlidingEngineTest, EveryKthBoundaryKeptTheRestRecomputedGivesTheSameBits) {
  for (int64_t k : {2, 3, 5}) {
    const std::vector<Plan> plans = {
        keeping_every(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), k),
        keeping_every(make_plan(layout_, 4, 1, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), k),
        keeping_every(make_plan(layout_, 4, 3, {0, 5}, {0, 2}, UpdateSchedule::AfterBackward), k),
        keeping_every(make_plan(layout_, 4, 2, {3}, {0, 3}, UpdateSchedule::AfterBackward, {2, 5}), k),
        keeping_every(
            converting_on_upload(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward)),
            k),
    };
    for (size_t p = 0; p < plans.size(); ++p) {
      for (int64_t tile : {0, 7}) {
        if (tile > 0 && p > 1) continue;  // tiles with everything on the GPU and everything on the host
        Plan plan = plans[p];
        plan.seq_tile = tile;
        SCOPED_TRACE(::testing::Message()
                     << "K " << k << ", plan " << p << ", seq_tile " << tile << ": " << plan.describe());
        expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan));
      }
    }
  }
  // Slow copies keep each reload in flight while the layers above still compute: the reload of a
  // group's kept boundary must not land in the staging buffer the group above still reads.
  SimDeviceOptions slow;
  slow.h2d_bytes_per_second = 2e8;
  slow.d2h_bytes_per_second = 2e8;
  slow.copy_latency_seconds = 50e-6;
  for (int64_t k : {2, 4}) {
    for (const bool one_staging_buffer : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "slow copies, K " << k << ", one staging buffer " << one_staging_buffer);
      Plan plan = keeping_every(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), k);
      plan.one_staging_buffer = one_staging_buffer;
      expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan, slow));
    }
  }
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  for (int64_t k : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "during the backward, K " << k);
    expect_identical(
        plain, sliding_run(config_, 9, rows_, 0.0,
                           keeping_every(
                               make_plan(layout_, 4, 2, {}, {0, 2, 3}, UpdateSchedule::DuringBackward), k)));
  }
}

// A backward that skips the recompute reads the intermediates its own forward kept: the same
// values the recompute would produce, so the same bits. Mixed with offloaded boundaries, resident
// units, device-updated units, both update schedules, and for every layer.
TEST_F(SlidingEngineTest, LayersThatKeepTheirInternalsSkipTheRecomputeExactly) {
  expect_identical(
      reference_, sliding_run(config_, 9, rows_, 0.5,
                              keeping_internals(
                                  make_plan(layout_, 4, 2, {}, {0}, UpdateSchedule::AfterBackward), {2, 3})));
  expect_identical(
      reference_,
      sliding_run(config_, 9, rows_, 0.5,
                  keeping_internals(make_plan(layout_, 4, 2, {3}, {1}, UpdateSchedule::AfterBackward, {2, 5}),
                                    {0, 3})));
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(
      plain, sliding_run(config_, 9, rows_, 0.0,
                         keeping_internals(make_plan(layout_, 4, 3, {}, {}, UpdateSchedule::DuringBackward),
                                           {0, 1, 2, 3})));
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               keeping_internals(make_plan(layout_, 4, 2, {}, {},
                                                           UpdateSchedule::AfterBackward, all_units(layout_)),
                                                 {0, 1, 2, 3})));
}

// With the norms' outputs kept beside the internals, the backward runs neither norm again and
// reads what the forward wrote: the same bits; with the activation kept as well it runs nothing
// of the forward again, and the same holds. On the GPU and on the host (its internals' copies
// carry the norms and the activation too), with both update schedules.
TEST_F(SlidingEngineTest, LayersThatKeepTheNormOutputsTooSkipThemExactly) {
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  for (const KeptInternals kept : {KeptInternals::WithNorms, KeptInternals::WithActivation}) {
    SCOPED_TRACE(static_cast<int>(kept));
    expect_identical(
        reference_,
        sliding_run(
            config_, 9, rows_, 0.5,
            keeping_more(
                keeping_internals(make_plan(layout_, 4, 2, {}, {0}, UpdateSchedule::AfterBackward), {2, 3}),
                kept)));
    expect_identical(
        plain,
        sliding_run(
            config_, 9, rows_, 0.0,
            keeping_more(
                offloading_internals(
                    keeping_internals(make_plan(layout_, 4, 3, {}, {}, UpdateSchedule::DuringBackward), {3}),
                    {0, 1}),
                kept)));
    expect_identical(
        reference_, sliding_run(config_, 9, rows_, 0.5,
                                keeping_more(keeping_internals(
                                                 make_plan(layout_, 4, 2, {}, {},
                                                           UpdateSchedule::AfterBackward, all_units(layout_)),
                                                 {0, 1, 2, 3}),
                                             kept)));
  }
}

// Internals sent to the host after the forward and fetched back before the backward are the bits
// the forward wrote: one layer (one staging buffer) or several (a ring of two, adjacent layers
// taking turns), beside GPU-kept internals, offloaded boundaries, resident and device-updated
// units, both update schedules, and with slow copies that keep the reloads in flight while the
// layers above still compute.
TEST_F(SlidingEngineTest, LayersWithInternalsOnTheHostSkipTheRecomputeExactly) {
  SimDeviceOptions slow;
  slow.h2d_bytes_per_second = 2e8;
  slow.d2h_bytes_per_second = 2e8;
  slow.copy_latency_seconds = 50e-6;
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               offloading_internals(
                                   make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward), {1})));
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               offloading_internals(
                                   keeping_internals(
                                       make_plan(layout_, 4, 2, {}, {0}, UpdateSchedule::AfterBackward), {3}),
                                   {0, 1, 2}),
                               slow));
  expect_identical(
      reference_,
      sliding_run(config_, 9, rows_, 0.5,
                  offloading_internals(
                      make_plan(layout_, 4, 2, {3}, {1}, UpdateSchedule::AfterBackward, {2, 5}), {0, 1, 3})));
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(
      plain, sliding_run(config_, 9, rows_, 0.0,
                         offloading_internals(
                             make_plan(layout_, 4, 3, {}, {}, UpdateSchedule::DuringBackward), {0, 1, 2, 3}),
                         slow));
}

// Uploading the fp32 masters (converted on the device) instead of a copy the CPU wrote gives the
// same weights. Without clipping the decoder layers' gradients take turns in a ring of three
// buffers (four layers: the ring wraps every step), and a slow d2h with copy latency makes the
// ring's wait for the previous gradient's update matter; with clipping every unit keeps a buffer
// of its own. Resident units, offloaded boundaries, kept internals and device-updated units mixed in.
TEST_F(SlidingEngineTest, MastersConvertedOnUploadGiveTheSameSteps) {
  SimDeviceOptions slow;
  slow.h2d_bytes_per_second = 4e9;
  slow.d2h_bytes_per_second = 1e9;
  slow.copy_latency_seconds = 50e-6;
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(
      plain,
      sliding_run(config_, 9, rows_, 0.0,
                  converting_on_upload(make_plan(layout_, 4, 2, {}, {1, 3}, UpdateSchedule::DuringBackward)),
                  slow));
  expect_identical(
      plain, sliding_run(config_, 9, rows_, 0.0,
                         converting_on_upload(keeping_internals(
                             make_plan(layout_, 4, 3, {0, 2, 5}, {}, UpdateSchedule::DuringBackward), {3}))));
  expect_identical(plain, sliding_run(config_, 9, rows_, 0.0,
                                      converting_on_upload(make_plan(layout_, 4, 2, {}, {0},
                                                                     UpdateSchedule::DuringBackward, {3}))));
  expect_identical(
      reference_,
      sliding_run(config_, 9, rows_, 0.5,
                  converting_on_upload(make_plan(layout_, 4, 2, {4}, {0, 2}, UpdateSchedule::AfterBackward)),
                  slow));
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               converting_on_upload(
                                   make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, {1, 5}))));
}

// The untied embedding is updated in two passes, its rows without a gradient while the step
// computes and its token rows at the step's end (unit_updater.h); the plans above match the plain
// trainer's single pass bit for bit only if both passes are right, and the data leaves rows of
// every step without a gradient, so both run.
TEST_F(SlidingEngineTest, EveryStepLeavesEmbeddingRowsWithoutAGradient) {
  ASSERT_FALSE(layout_.tied);
  for (int64_t s = 0; s < kSteps; ++s) {
    const StepBatch batch = batch_for(rows_, s);
    const std::vector<int32_t> rows = distinct_ids(batch.ids, config_.vocab_size);
    EXPECT_GT(rows.size(), 10u);
    EXPECT_LT(rows.size(), static_cast<size_t>(config_.vocab_size) * 3 / 4) << "step " << s + 1;
    EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
    EXPECT_EQ(std::adjacent_find(rows.begin(), rows.end()), rows.end());
  }
}

// The untied embedding's weights go up range by range of its table (UnitUpdater::kRowRanges), each
// range once the CPU's token pass has updated it: every upload of the table is the ranges' copies,
// in row order, covering it once. (That each copy waits for its range's update is what the plans
// above hold to the plain trainer's bits: without the wait they differ.)
TEST_F(SlidingEngineTest, TheEmbeddingGoesUpRangeByRangeInRowOrder) {
  const size_t E = layout_.embedding_unit();
  const int64_t table_rows = layout_.units[E].params[0].shape[0];
  const size_t numel = static_cast<size_t>(layout_.units[E].numel);
  ASSERT_GE(table_rows, UnitUpdater::kRowRanges);
  for (const Plan& plan :
       {make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
        converting_on_upload(make_plan(layout_, 4, 2, {E}, {}, UpdateSchedule::AfterBackward))}) {
    SCOPED_TRACE(plan.describe());
    auto sim = make_sim_device({});
    test::ScheduleRecorder recorder(*sim);
    const test::ScratchDir scratch("ranges");
    Tracer tracer(recorder, scratch / "trace.json", {});
    auto ops = make_device_ops(recorder);
    SlidingEngine engine(config_, layout_, recorder, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    assign_random_weights(engine, config_, 9);
    recorder.start(tracer);
    for (int64_t s = 0; s < kSteps; ++s) engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
    engine.finish_updates();
    recorder.stop();
    // The copies out of the embedding's weights on the host: its staging buffer, or its masters.
    const bool converts = plan.weight_upload == WeightUpload::ConvertOnUpload;
    const size_t element = converts ? sizeof(float) : dtype_size(plan.weight_dtype);
    const char* host = converts ? reinterpret_cast<const char*>(engine.host().unit(E).master.data())
                                : static_cast<const char*>(engine.host().unit(E).staging.data());
    std::vector<std::pair<size_t, size_t>> copies;  // (first element, elements)
    for (const auto& e : recorder.entries()) {
      const char* src = static_cast<const char*>(e.src);
      if (e.call != test::ScheduleRecorder::Call::Copy || src < host || src >= host + numel * element)
        continue;
      EXPECT_EQ(e.stream, static_cast<int>(StreamKind::HostToDevice));
      copies.emplace_back(static_cast<size_t>(src - host) / element, e.bytes / element);
    }
    const size_t row_len = numel / static_cast<size_t>(table_rows);
    ASSERT_EQ(copies.size(), static_cast<size_t>(kSteps * UnitUpdater::kRowRanges)) << "one upload a step";
    for (size_t k = 0; k < copies.size(); ++k) {
      const int64_t r = static_cast<int64_t>(k) % UnitUpdater::kRowRanges;
      const int64_t begin = r == 0 ? 0 : UnitUpdater::row_range_end(table_rows, r - 1);
      EXPECT_EQ(copies[k].first, static_cast<size_t>(begin) * row_len) << "copy " << k;
      EXPECT_EQ(copies[k].second,
                static_cast<size_t>(UnitUpdater::row_range_end(table_rows, r) - begin) * row_len)
          << "copy " << k;
    }
  }
}

// The CPU AdamW's passes are timed over whole host-updated units from the second step on: their
// parameters (not the units' padding) counted once a step, the row-sparse embedding's token rows and the
// device-updated units not at all, with and without clipping.
TEST_F(SlidingEngineTest, TheCpuUpdatesAreTimedOverWholeUnitsAfterTheFirstStep) {
  const size_t E = layout_.embedding_unit();
  for (const Plan& plan : {make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
                           make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::DuringBackward)}) {
    SCOPED_TRACE(plan.describe());
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    assign_random_weights(engine, config_, 9);
    const double clip = plan.update == UpdateSchedule::AfterBackward ? 0.5 : 0.0;
    engine.step(1, batch_for(rows_, 0), hyper_at(0), clip);
    engine.finish_updates();
    EXPECT_EQ(engine.host().cpu_update_rate().params, 0.0) << "the first step is not timed";
    double per_step = 0.0, smallest = 0.0;
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      if (!engine.host().on_host(u) || engine.host().row_sparse(u)) continue;
      double params = 0.0;
      for (const ParamSlot& param : layout_.units[u].params) params += static_cast<double>(param.numel);
      per_step += params;
      smallest = smallest == 0.0 ? params : std::min(smallest, params);
    }
    ASSERT_TRUE(engine.host().row_sparse(E));
    ASSERT_GT(per_step, 0.0);
    for (int64_t s = 1; s < kSteps; ++s) engine.step(s + 1, batch_for(rows_, s), hyper_at(s), clip);
    engine.finish_updates();
    const UnitUpdater::CpuUpdateRate rate = engine.host().cpu_update_rate();
    EXPECT_EQ(rate.params, per_step * static_cast<double>(kSteps - 1));
    EXPECT_EQ(rate.smallest_unit_params, smallest);
    EXPECT_GT(rate.seconds, 0.0);
  }
}

// Evaluation between steps runs the forward uses of the same slots and buffers with the weights of
// the last update: the plain trainer's loss bit for bit, and the steps around it unchanged, for
// streamed, offloaded, resident, device-updated, kept-internals and converted-upload plans.
TEST_F(SlidingEngineTest, EvaluationBetweenStepsGivesThePlainLossAndChangesNoStep) {
  const StepBatch batch = batch_for(rows_, 7);
  const std::vector<double> expected = plain_evals(config_, 9, rows_, 0.5, batch);
  const std::vector<Plan> plans = {
      make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
      make_plan(layout_, 4, 3, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward),
      make_plan(layout_, 4, 2, {0, 3, 4, 5}, {1}, UpdateSchedule::AfterBackward),
      make_plan(layout_, 4, 2, {3}, {1}, UpdateSchedule::AfterBackward, {2, 5}),
      keeping_internals(make_plan(layout_, 4, 2, {}, {0}, UpdateSchedule::AfterBackward), {2, 3}),
      offloading_internals(make_plan(layout_, 4, 2, {}, {3}, UpdateSchedule::AfterBackward), {0, 2}),
      make_plan(layout_, 4, 2, {0, 1, 2, 3, 4, 5}, {}, UpdateSchedule::AfterBackward, all_units(layout_)),
      converting_on_upload(make_plan(layout_, 4, 2, {}, {0, 2}, UpdateSchedule::AfterBackward)),
      keeping_every(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), 3),
      test::in_sweeps(keeping_internals(make_plan(layout_, 4, 2, all_units(layout_), {},
                                                  UpdateSchedule::AfterBackward, {2, 3}),
                                        {0, 3}),
                      2),
      test::streaming_optimizer(make_plan(layout_, 4, 2, {0, 5}, {}, UpdateSchedule::AfterBackward, {4}),
                                layout_, {0, 1}, 1000),
  };
  for (size_t k = 0; k < plans.size(); ++k) {
    SCOPED_TRACE("plan " + std::to_string(k) + ": " + plans[k].describe());
    std::vector<double> evals;
    expect_identical(reference_, sliding_run_evaluating(config_, 9, rows_, 0.5, plans[k], batch, &evals));
    ASSERT_EQ(evals.size(), expected.size());
    for (size_t s = 0; s < evals.size(); ++s)
      EXPECT_EQ(evals[s], expected[s]) << "evaluation after step " << s;
  }
  // Without clipping, updates run during the backward.
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  const std::vector<double> expected_unclipped = plain_evals(config_, 9, rows_, 0.0, batch);
  std::vector<double> evals;
  expect_identical(
      plain, sliding_run_evaluating(config_, 9, rows_, 0.0,
                                    make_plan(layout_, 4, 2, {}, {3}, UpdateSchedule::DuringBackward), batch,
                                    &evals));
  ASSERT_EQ(evals, expected_unclipped);
}

TEST(DistinctIds, SortsDropsRepeatsAndRefusesIdsOutsideTheVocabulary) {
  EXPECT_EQ(distinct_ids(std::vector<int32_t>{7, 3, 7, 0, 3}, 8), (std::vector<int32_t>{0, 3, 7}));
  EXPECT_TRUE(distinct_ids(std::vector<int32_t>{}, 8).empty());
  EXPECT_THROW(distinct_ids(std::vector<int32_t>{1, 8}, 8), Error);
  EXPECT_THROW(distinct_ids(std::vector<int32_t>{-1}, 8), Error);
}

// A step's chunks tell attention whether their rows are plain causal sequences
// (TokenChunk::row_tokens): only when every row of the chunk is one document, then padding.
TEST(StepBatchRows, ChunksSayWhetherEveryRowAttendsAsOneSequence) {
  constexpr int64_t kRowTokens = 8;
  const std::vector<PackedRow> whole =
      pack_documents({counting_document(8), counting_document(5), counting_document(20)}, kRowTokens, false);
  std::vector<const PackedRow*> rows;
  for (const PackedRow& r : whole) rows.push_back(&r);
  StepBatch batch = make_step_batch(rows, kRowTokens, 1);
  ASSERT_EQ(batch.chunks(), 3);
  for (int64_t c = 0; c < batch.chunks(); ++c) EXPECT_EQ(batch.chunk(c).row_tokens, kRowTokens);

  // The fourth row holds two documents: its chunk (rows 2 and 3) may not attend causally over
  // whole rows; the first chunk still may.
  const std::vector<PackedRow> packed =
      pack_documents({counting_document(3), counting_document(4)}, kRowTokens, true);
  rows.push_back(&packed[0]);
  batch = make_step_batch(rows, kRowTokens, 2);
  ASSERT_EQ(batch.chunks(), 2);
  EXPECT_EQ(batch.chunk(0).row_tokens, kRowTokens);
  EXPECT_EQ(batch.chunk(1).row_tokens, 0);
}

// A step's chunks carry their rows' causal segments (attention_segments), as bounds relative to
// the chunk laid out like doc_start, which a device's slice of the chunks keeps.
TEST(StepBatchRows, ChunksCarryTheirRowsSegments) {
  using Ids = std::vector<int32_t>;
  constexpr int64_t kRowTokens = 8, kT = 2 * kRowTokens;
  // Two documents, then padding that joins the second; one document and padding; one filling it.
  const std::vector<PackedRow> packed =
      pack_documents({counting_document(3), counting_document(4)}, kRowTokens, true);
  const std::vector<PackedRow> whole =
      pack_documents({counting_document(5), counting_document(8)}, kRowTokens, false);
  ASSERT_EQ(attention_segments(packed[0]), (Ids{0, 3}));
  const StepBatch batch = make_step_batch({&packed[0], &whole[0], &whole[1], &packed[0]}, kRowTokens, 2);
  ASSERT_EQ(batch.chunks(), 2);
  ASSERT_EQ(batch.segment_bounds.size(), static_cast<size_t>(2 * kT));
  Ids expected(2 * kT, 0);
  for (const auto& [at, value] : std::vector<std::pair<int, int32_t>>{
           {0, 0}, {1, 3}, {2, 8}, {3, 16}, {kT, 0}, {kT + 1, 8}, {kT + 2, 11}, {kT + 3, 16}})
    expected[static_cast<size_t>(at)] = value;
  EXPECT_EQ(batch.segment_bounds, expected);
  EXPECT_EQ(batch.chunk_segments, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(batch.chunk_longest_segment, (std::vector<int64_t>{8, 8}));
  for (int64_t c = 0; c < batch.chunks(); ++c) {
    const TokenChunk t = batch.chunk(c);
    EXPECT_EQ(t.segments, 3);
    EXPECT_EQ(t.longest_segment, 8);
    EXPECT_EQ(t.segment_bounds, batch.segment_bounds.data() + c * kT);
  }
  // The second chunk alone, as a device of a group runs it.
  const StepBatch second = chunk_slice(batch, 1, 1);
  EXPECT_EQ(second.segment_bounds, Ids(expected.begin() + kT, expected.end()));
  EXPECT_EQ(second.chunk(0).segments, 3);
  EXPECT_EQ(second.chunk(0).longest_segment, 8);

  // Rows of one token: a chunk of T tokens in T segments has no room for its T + 1 bounds, so it
  // keeps none and attention uses doc_start.
  const std::vector<PackedRow> single = pack_documents({counting_document(4)}, 1, true);
  for (int64_t micro : {1, 2}) {
    const StepBatch b = make_step_batch({&single[0], &single[1], &single[2], &single[3]}, 1, micro);
    for (int64_t c = 0; c < b.chunks(); ++c) {
      EXPECT_EQ(b.chunk(c).segments, 0);
      EXPECT_EQ(b.chunk(c).longest_segment, 0);
      EXPECT_EQ(b.chunk(c).segment_bounds, nullptr);
    }
    EXPECT_EQ(b.segment_bounds, Ids(4, 0));
  }
  // Rows of two one-token documents: the second joins the first, so a row is one segment.
  const std::vector<PackedRow> pairs = pack_documents(
      {counting_document(1), counting_document(1), counting_document(1), counting_document(1)}, 2, true);
  const StepBatch b = make_step_batch({&pairs[0], &pairs[1]}, 2, 2);
  EXPECT_EQ(b.segment_bounds, (Ids{0, 2, 4, 0}));
  EXPECT_EQ(b.chunk(0).segments, 2);
  EXPECT_EQ(b.chunk(0).longest_segment, 2);

  // Random packed rows: each segment starts a document, and its other tokens are that document's
  // or reach nothing (AttentionMask::segment_bounds' promise, ops/ops.h).
  std::vector<PackedRow> storage;
  const StepBatch random = test::packed_batch(1000, 64, 12, 3, 5, storage);
  const int64_t T = random.chunk_tokens();
  for (int64_t c = 0; c < random.chunks(); ++c) {
    const TokenChunk t = random.chunk(c);
    ASSERT_GT(t.segments, 1);
    ASSERT_EQ(t.segment_bounds[0], 0);
    ASSERT_EQ(t.segment_bounds[t.segments], T);
    int64_t longest = 0;
    for (int64_t i = 0; i < t.segments; ++i) {
      const int32_t begin = t.segment_bounds[i], end = t.segment_bounds[i + 1];
      ASSERT_LT(begin, end);
      longest = std::max<int64_t>(longest, end - begin);
      ASSERT_EQ(t.doc_start[begin], begin);
      for (int32_t k = begin + 1; k < end; ++k) {
        if (t.doc_start[k] == begin) continue;
        const bool alone = t.doc_start[k] == k && (k + 1 == T || t.doc_start[k + 1] != k);
        EXPECT_TRUE(alone && t.targets[k] == kIgnoreIndex) << "chunk " << c << " token " << k;
      }
    }
    EXPECT_EQ(t.longest_segment, longest);
  }
}

TEST_F(SlidingEngineTest, ClippingNeedsTheAfterBackwardSchedule) {
  EXPECT_THROW(
      sliding_run(config_, 9, rows_, 0.5, make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::DuringBackward)),
      Error);
}

// Units placed ResidentWithOptimizer keep fp32 gradients, master, m and v on the device and are
// updated there (the reference AdamW as stream-ordered tasks on the simulated device); their norm
// partials join the host units' in unit order, so every split is the plain trainer's step.
TEST_F(SlidingEngineTest, SomeUnitsWithTheirOptimizerOnTheDevice) {
  // A layer in the middle and the head beside streamed and resident units, offloaded activations.
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               make_plan(layout_, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward, {2, 5})));
  // The embedding (the first unit of the norm's order) and the last layer.
  expect_identical(reference_,
                   sliding_run(config_, 9, rows_, 0.5,
                               make_plan(layout_, 4, 1, {}, {1}, UpdateSchedule::AfterBackward, {0, 4})));
}

TEST_F(SlidingEngineTest, SomeUnitsWithTheirOptimizerOnTheDeviceWithoutClipping) {
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(plain,
                   sliding_run(config_, 9, rows_, 0.0,
                               make_plan(layout_, 4, 2, {1}, {3}, UpdateSchedule::DuringBackward, {0, 3})));
  expect_identical(plain,
                   sliding_run(config_, 9, rows_, 0.0,
                               make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, {4, 5})));
}

// Layers placed ResidentWithStreamedOptimizer are updated on the device over their master, m and v
// in the host's pinned arrays, a piece at a time through the ring (pieces that cut parameters in
// two, more pieces than slots): the plain trainer's step beside host-updated, device-updated and
// streamed units, in sweeps or not, with clipping or without.
TEST_F(SlidingEngineTest, LayersWithTheirOptimizerStateStreamedThroughTheDevice) {
  using test::in_sweeps;
  using test::streaming_optimizer;
  const std::vector<size_t> everything = all_units(layout_);
  const std::vector<Plan> clipped = {
      streaming_optimizer(make_plan(layout_, 4, 2, {0, 3, 4, 5}, {0, 2}, UpdateSchedule::AfterBackward, {2}),
                          layout_, {0, 3}, 1000),
      in_sweeps(
          streaming_optimizer(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward, {1, 5}),
                              layout_, {1, 2, 3}, 777),
          3),
      streaming_optimizer(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward), layout_,
                          {0, 1, 2, 3}, 0),  // one piece a layer
  };
  for (const Plan& plan : clipped) {
    SCOPED_TRACE(plan.describe());
    expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan));
  }
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  for (int64_t sweeps : {1, 2}) {
    const Plan plan = in_sweeps(
        streaming_optimizer(make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::DuringBackward, {1}),
                            layout_, {2, 3}, 1000),
        sweeps);
    SCOPED_TRACE(plan.describe());
    expect_identical(plain, sliding_run(config_, 9, rows_, 0.0, plan));
  }
  // The embedding and the head are not decoder layers: refused.
  Plan embedding = make_plan(layout_, 4, 2, everything, {}, UpdateSchedule::AfterBackward);
  embedding.units[layout_.embedding_unit()] = UnitPlacement::ResidentWithStreamedOptimizer;
  EXPECT_THROW(sliding_run(config_, 9, rows_, 0.5, embedding), Error);
}

// Plan::optimizer_on_gpu(): the norm and the clip coefficient are computed on the device too.
TEST_F(SlidingEngineTest, EverythingOnTheDevice) {
  Plan all = make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, all_units(layout_));
  ASSERT_TRUE(all.optimizer_on_gpu());
  expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, all));
  const RunResult plain = plain_run(config_, 9, rows_, 0.0);
  expect_identical(plain, sliding_run(config_, 9, rows_, 0.0, all));
  all.update = UpdateSchedule::DuringBackward;
  expect_identical(plain, sliding_run(config_, 9, rows_, 0.0, all));
}

// What a checkpoint reads (finish_updates) and what a resume writes (weights_changed) for host and
// device units alike, and with the masters uploaded as they are: the plain trainer's masters, m and
// v after 2 steps; then 2 more steps from them match the plain trainer's 4.
TEST_F(SlidingEngineTest, CheckpointStateAndResumeWithDeviceUnits) {
  const PlainState at2 = plain_state(config_, 9, rows_, 0.5, 2);
  const std::vector<Plan> plans = {
      make_plan(layout_, 4, 2, {2}, {0}, UpdateSchedule::AfterBackward, {1, 4}),
      make_plan(layout_, 4, 2, {2}, {0}, UpdateSchedule::AfterBackward, all_units(layout_)),
      converting_on_upload(make_plan(layout_, 4, 2, {2}, {0}, UpdateSchedule::AfterBackward, {4})),
      test::streaming_optimizer(make_plan(layout_, 4, 2, {2, 5}, {0}, UpdateSchedule::AfterBackward, {4}),
                                layout_, {0, 1}, 1000),
  };
  for (const Plan& plan : plans) {
    SCOPED_TRACE(::testing::Message() << plan.describe());
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    {
      SlidingEngine engine(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
      assign_random_weights(engine, config_, 9);
      for (int64_t s = 0; s < 2; ++s) engine.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
      engine.finish_updates();
      for (size_t u = 0; u < layout_.units.size(); ++u) {
        EXPECT_TRUE(same_bits(engine.host().unit(u).master, at2.masters[u])) << "master of unit " << u;
        EXPECT_TRUE(same_bits(engine.host().unit(u).m, at2.m[u])) << "m of unit " << u;
        EXPECT_TRUE(same_bits(engine.host().unit(u).v, at2.v[u])) << "v of unit " << u;
      }
    }
    SlidingEngine resumed(config_, layout_, *device, *ops, plan, kMicro * kSeq, kGlobal / kMicro, false);
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      resumed.host().unit(u).master.assign(at2.masters[u]);
      resumed.host().unit(u).m.assign(at2.m[u]);
      resumed.host().unit(u).v.assign(at2.v[u]);
    }
    resumed.weights_changed(2);
    RunResult run;
    for (int64_t s = 2; s < kSteps; ++s) {
      const SlidingStepResult r = resumed.step(s + 1, batch_for(rows_, s), hyper_at(s), 0.5);
      EXPECT_EQ(r.loss, reference_.losses[static_cast<size_t>(s)]) << "loss of step " << s + 1;
      EXPECT_EQ(r.grad_norm, reference_.norms[static_cast<size_t>(s)]) << "grad norm of step " << s + 1;
    }
    resumed.finish_updates();
    for (size_t u = 0; u < layout_.units.size(); ++u)
      EXPECT_TRUE(same_bits(resumed.host().unit(u).master, reference_.masters[u])) << "unit " << u;
  }
}

// The memory model is the truth: after construction the device holds exactly device_bytes() and
// the pinned host memory is exactly host_bytes().pinned, for every kind of plan.
TEST_F(SlidingEngineTest, AllocatesWhatTheMemoryModelSays) {
  std::vector<Plan> plans = {
      make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
      make_plan(layout_, 4, 3, {0, 5}, {0, 1, 3}, UpdateSchedule::AfterBackward),
      make_plan(layout_, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward, {2, 5}),
      make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, all_units(layout_)),
      keeping_internals(make_plan(layout_, 4, 2, {3}, {0}, UpdateSchedule::AfterBackward, {5}), {1, 3}),
      converting_on_upload(make_plan(layout_, 4, 2, {3}, {0, 2}, UpdateSchedule::DuringBackward)),
      converting_on_upload(make_plan(layout_, 4, 3, {}, {}, UpdateSchedule::AfterBackward, {2})),
      keeping_every(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), 2),
      keeping_every(make_plan(layout_, 4, 1, {}, {}, UpdateSchedule::AfterBackward), 3),
      // Activations for one sweep's micro-chunks; the gathered embedding rows for the step's.
      test::in_sweeps(
          keeping_internals(
              make_plan(layout_, 4, 2, all_units(layout_), {}, UpdateSchedule::AfterBackward, {2}), {1, 3}),
          3),
      test::in_sweeps(make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, all_units(layout_)), 2),
      // The streamed optimizer's ring on the device, its units' state pinned.
      test::in_sweeps(test::streaming_optimizer(make_plan(layout_, 4, 2, all_units(layout_), {},
                                                          UpdateSchedule::AfterBackward, {1}),
                                                layout_, {1, 3}, 1000),
                      3),
      test::streaming_optimizer(make_plan(layout_, 4, 2, {5}, {1}, UpdateSchedule::DuringBackward), layout_,
                                {2}, 0),
  };
  Plan two_staging =
      keeping_every(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), 2);
  two_staging.one_staging_buffer = false;
  plans.push_back(two_staging);
  // Attention in two groups of KV heads (model/decoder_layer.h), untiled and tiled.
  for (const int64_t tile : {0, 7}) {
    Plan grouped =
        keeping_every(make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), 2);
    grouped.head_groups = 2;
    grouped.seq_tile = tile;
    plans.push_back(grouped);
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "plan " << k << ": " << plans[k].describe());
    auto device = make_sim_device({});
    auto ops = make_device_ops(*device);
    SlidingEngine engine(config_, layout_, *device, *ops, plans[k], kMicro * kSeq, kGlobal / kMicro, false);
    const DeviceBytes d = device_bytes(config_, layout_, plans[k], kMicro * kSeq, kGlobal / kMicro);
    const HostBytes h = host_bytes(config_, layout_, plans[k], kMicro * kSeq, kGlobal / kMicro);
    EXPECT_EQ(device->memory().in_use, d.total());
    EXPECT_EQ(device->pinned_memory().in_use, h.pinned);
    size_t pageable = 0;
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      // Converting on upload, a host-updated unit's masters are pinned (counted above).
      const bool pinned_masters =
          plans[k].weight_upload == WeightUpload::ConvertOnUpload && engine.host().on_host(u);
      // A streamed optimizer's master, m and v are all pinned.
      const bool all_pinned = plans[k].units[u] == UnitPlacement::ResidentWithStreamedOptimizer;
      pageable += (all_pinned       ? 0
                   : pinned_masters ? 2
                                    : 3) *
                  HostArray::mapped_bytes(engine.host().unit(u).master.size());
    }
    EXPECT_EQ(pageable, h.pageable);
  }
}

TEST(SlidingEngineTied, TiedEmbeddingsStayResident) {
  ModelConfig config = preset_config("llama", "tiny");
  nlohmann::json json = config.raw;
  json["tie_word_embeddings"] = true;
  config = parse_model_config(json, "test");
  const ModelLayout layout = build_model_layout(config);
  const auto rows = make_rows(config.vocab_size, 6);
  const RunResult plain = plain_run(config, 4, rows, 1.0);
  expect_identical(plain, sliding_run(config, 4, rows, 1.0,
                                      make_plan(layout, 2, 2, {0}, {1}, UpdateSchedule::AfterBackward)));
  // The shared table with its optimizer on the device, the head (final norm) streamed; then both.
  expect_identical(plain, sliding_run(config, 4, rows, 1.0,
                                      make_plan(layout, 2, 2, {}, {1}, UpdateSchedule::AfterBackward, {0})));
  expect_identical(plain,
                   sliding_run(config, 4, rows, 1.0,
                               make_plan(layout, 2, 2, {}, {}, UpdateSchedule::AfterBackward, {0, 3})));
  expect_identical(
      plain,
      sliding_run(config, 4, rows, 1.0,
                  converting_on_upload(make_plan(layout, 2, 2, {0}, {0}, UpdateSchedule::AfterBackward))));
  const RunResult unclipped = plain_run(config, 4, rows, 0.0);
  expect_identical(
      unclipped,
      sliding_run(config, 4, rows, 0.0,
                  converting_on_upload(make_plan(layout, 2, 2, {0, 3}, {}, UpdateSchedule::DuringBackward))));
  EXPECT_THROW(
      sliding_run(config, 4, rows, 1.0, make_plan(layout, 2, 2, {}, {}, UpdateSchedule::AfterBackward)),
      Error);
}

TEST_F(SlidingEngineTest, ABudgetTooSmallIsRefusedWithTheNumbers) {
  SimDeviceOptions tiny;
  tiny.memory_capacity = 64 << 10;
  try {
    sliding_run(config_, 9, rows_, 0.5, make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
                tiny);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GiB of device memory"), std::string::npos) << e.what();
  }
}

TEST_F(SlidingEngineTest, SearchedPlanFitsItsBudgetAndMatches) {
  PlanRequest request;
  request.micro_batch = kMicro;
  request.seq_len = kSeq;
  request.global_batch = kGlobal;
  request.weight_dtype = DType::F32;
  request.grad_dtype = DType::F32;
  // A budget that holds the slots and some activations but not the whole model.
  Plan all_streamed = make_plan(layout_, 4, 2, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward);
  const size_t minimum =
      device_bytes(config_, layout_, all_streamed, kMicro * kSeq, kGlobal / kMicro).total();
  request.device_budget = minimum * 3 / 2;
  const MachineProfile profile = nominal_profile(config_, kSeq, DType::F32);
  const Plan plan = search_plans(config_, layout_, profile, request).best.plan;
  EXPECT_LE(device_bytes(config_, layout_, plan, kMicro * kSeq, kGlobal / kMicro).total(),
            request.device_budget);
  SimDeviceOptions sim;
  sim.memory_capacity = request.device_budget;
  expect_identical(reference_, sliding_run(config_, 9, rows_, 0.5, plan, sim));

  request.device_budget = minimum / 2;
  try {
    search_plans(config_, layout_, profile, request);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give gpu_memory of at least"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
