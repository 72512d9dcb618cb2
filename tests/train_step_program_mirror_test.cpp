// planner/step_program.cpp mirrors SlidingEngine::step and the UnitUpdater's worker so that the
// cost model can simulate a step; this test holds the mirror to the engine. For a handful of plans
// the engine runs three steps on the simulated device, traced (TracingDevice, TracingOps,
// TracingAdamW) over a ScheduleRecorder, and build_step_program builds the same three steps. Both
// are read into a StepSchedule (tests/step_schedule.h; the engine's run as
// tests/schedule_reading.h says) and must be equal: the same tasks in the same order on
// every lane, issued by the host in the same order, with the same happens-before order between
// the lanes.
//
// Not compared: the host thread's waits for the CPU updater (before uploading a unit it updates,
// and for the step's gradient norm). The engine waits on a condition variable the device does not
// see, so the program's host waits for CPU tasks are left out (program_schedule). What the host
// issues between them is compared (the issue order).
//
// Drift. The engine does work the program has no task for; the program leaves out memsets on
// purpose (step_program.h), the rest is drift, expected here plan by plan so that it stays in view:
//   * kDeviceNormPartials: a unit updated on the device gets its gradient-norm partials computed
//     on the compute stream after its backward (DeviceOptimizer::gradient_done: its gradient read
//     once more), which the program charges for host units (GpuGradNorm) but not for these;
//   * kDeviceNormSum: device units after the backward (every unit on the device, or beside host
//     units with the after-backward schedule): the partials' sum and the clip coefficient
//     (DeviceOptimizer::update_all: a memset, an accumulate per unit, a clip kernel);
//   * kRowGather: the row-sparse embedding's gather of its token rows' gradients on the compute
//     stream before they go down (SlidingEngine::send_gradients).
// Apart from these the two agree on every plan below.
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/trace/tracing_device.h"
#include "engine/sliding_engine.h"
#include "ops/device_ops.h"
#include "planner/nominal_profile.h"
#include "planner/step_program.h"
#include "schedule_reading.h"
#include "schedule_recorder.h"
#include "sliding_plans.h"
#include "step_schedule.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

using test::EngineReading;
using test::kDeviceNormPartials;
using test::kDeviceNormSum;
using test::kMemsets;
using test::kRowGather;
using test::ScheduleRecorder;
using test::StepSchedule;

constexpr int kMirrorSteps = 3;

struct MirrorCase {
  std::string name;
  Plan plan;
  double max_grad_norm;
  std::set<std::string> drift;  // the engine's unmodelled work this plan shows (see the top)
};

class StepProgramMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["num_hidden_layers"] = 4;
    config_ = parse_model_config(json, "test");
    layout_ = build_model_layout(config_);
    rows_ = test::make_rows(config_.vocab_size, 5);
  }

  // The engine's three steps, read as a schedule; `drift` gets the kinds of work it did that the
  // program has no task for.
  StepSchedule engine_schedule(const Plan& plan, double max_grad_norm, std::set<std::string>* drift) {
    auto sim = make_sim_device({});
    ScheduleRecorder recorder(*sim);
    Tracer tracer(recorder, scratch_ / "trace.json", {1});
    TracingDevice device(recorder, tracer);
    auto ops = make_device_ops(device);
    SlidingEngine engine(config_, layout_, device, *ops, plan, test::kMicro * test::kSeq,
                         test::kGlobal / test::kMicro, false);
    std::vector<std::vector<float>> weights;
    init_random_weights(config_, 9, weights);
    for (size_t u = 0; u < weights.size(); ++u) engine.host().unit(u).master.assign(weights[u]);
    engine.weights_changed(0);
    const LogLevel saved = log_level();
    set_log_level(LogLevel::Warn);
    // One trace window over every step, open until the last CPU update is done, so that no span
    // of any lane is cut.
    recorder.start(tracer);
    tracer.begin_step(1);
    for (int64_t s = 0; s < kMirrorSteps; ++s)
      engine.step(s + 1, test::batch_for(rows_, s), test::hyper_at(s), max_grad_norm);
    engine.host().wait_all_updated(kMirrorSteps);
    recorder.stop();
    tracer.end_step();
    set_log_level(saved);
    EngineReading reading(layout_, plan, recorder, tracer.spans());
    for (const auto& [reason, count] : reading.unmodelled)
      if (reason != kMemsets) drift->insert(reason);
    return std::move(reading.schedule);
  }

  StepSchedule program_schedule(const Plan& plan) const {
    const StepShape shape{test::kMicro * test::kSeq, test::kGlobal / test::kMicro};
    const StepProgram program = build_step_program(
        config_, layout_, plan, nominal_profile(config_, test::kSeq, DType::F32), shape, kMirrorSteps);
    return test::program_schedule(program.graph, layout_);
  }

  void check(const MirrorCase& c) {
    SCOPED_TRACE(c.name + ": " + c.plan.describe());
    std::set<std::string> drift;
    const StepSchedule engine = engine_schedule(c.plan, c.max_grad_norm, &drift);
    const StepSchedule program = program_schedule(c.plan);
    EXPECT_TRUE(test::same_schedule(engine, program));
    EXPECT_EQ(drift, c.drift) << "the engine's work the program does not model";
  }

  ModelConfig config_;
  ModelLayout layout_;
  std::vector<PackedRow> rows_;
  test::ScratchDir scratch_{"mirror"};
};

TEST_F(StepProgramMirrorTest, StreamedAndOffloadedUnits) {
  using test::make_plan;
  check({"two slots, everything streamed",
         make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
         0.5,
         {kRowGather}});
  check({"one slot, boundaries 0 and 2 offloaded",
         make_plan(layout_, 4, 1, {}, {0, 2}, UpdateSchedule::AfterBackward),
         0.5,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, RecomputedBoundaries) {
  using test::keeping_every;
  using test::make_plan;
  check({"one slot, every second boundary kept on the host, the others recomputed",
         keeping_every(make_plan(layout_, 4, 1, {}, {0, 1, 2, 3}, UpdateSchedule::AfterBackward), 2),
         0.5,
         {kRowGather}});
  check({"three slots, every third boundary kept (on the GPU, on the host), resident head",
         keeping_every(make_plan(layout_, 4, 3, {5}, {3}, UpdateSchedule::DuringBackward), 3),
         0.0,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, ResidentUnitsAndKeptInternals) {
  check({"resident embedding, layer 2 and head; offloaded boundaries; layer 2 keeps its internals",
         test::keeping_internals(
             test::make_plan(layout_, 4, 3, {0, 3, 5}, {0, 1}, UpdateSchedule::AfterBackward), {2}),
         0.5,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, InternalsOnTheHost) {
  check({"layers 0, 1 and 3 send their internals to the host (a ring of two), layer 2 keeps its own",
         test::offloading_internals(
             test::keeping_internals(test::make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
                                     {2}),
             {0, 1, 3}),
         0.5,
         {kRowGather}});
  check({"one layer's internals on the host (one staging buffer), updates during the backward",
         test::offloading_internals(test::make_plan(layout_, 4, 2, {4}, {0}, UpdateSchedule::DuringBackward),
                                    {2}),
         0.0,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, UpdatesDuringTheBackward) {
  check({"updates during the backward",
         test::make_plan(layout_, 4, 2, {2}, {3}, UpdateSchedule::DuringBackward),
         0.0,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, MastersConvertedOnUpload) {
  // Without clipping the layers' gradients take turns in a ring of three buffers: four layers
  // wrap it every step, so the d2h stream waits for the CPU.
  check(
      {"converted on upload, gradient ring",
       test::converting_on_upload(test::make_plan(layout_, 4, 2, {}, {1, 3}, UpdateSchedule::DuringBackward)),
       0.0,
       {kRowGather}});
  check(
      {"converted on upload, clipped, a resident layer",
       test::converting_on_upload(test::make_plan(layout_, 4, 2, {4}, {0, 2}, UpdateSchedule::AfterBackward)),
       0.5,
       {kRowGather}});
}

TEST_F(StepProgramMirrorTest, OptimizerOnTheDevice) {
  check({"layer 1 and the head updated on the device, clipped",
         test::make_plan(layout_, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward, {2, 5}),
         0.5,
         {kRowGather, kDeviceNormPartials, kDeviceNormSum}});
  check({"the embedding and layer 2 updated on the device during the backward",
         test::make_plan(layout_, 4, 2, {1}, {3}, UpdateSchedule::DuringBackward, {0, 3}),
         0.0,
         {kDeviceNormPartials}});
  check({"every unit on the device",
         test::make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, test::all_units(layout_)),
         0.5,
         {kDeviceNormPartials, kDeviceNormSum}});
  check({"every unit on the device, unclipped, updates during the backward",
         test::make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::DuringBackward, test::all_units(layout_)),
         0.0,
         {kDeviceNormPartials, kDeviceNormSum}});
}

TEST_F(StepProgramMirrorTest, Sweeps) {
  check({"three sweeps of one micro-chunk: host-updated and device-updated units, kept internals, clipped",
         test::in_sweeps(test::keeping_internals(test::make_plan(layout_, 4, 2, {0, 1, 4, 5}, {},
                                                                 UpdateSchedule::AfterBackward, {2, 3}),
                                                 {1, 3}),
                         3),
         0.5,
         {kRowGather, kDeviceNormPartials, kDeviceNormSum}});
  check({"two sweeps of two and one micro-chunks, updates during the last one's backward",
         test::in_sweeps(
             test::make_plan(layout_, 4, 2, test::all_units(layout_), {}, UpdateSchedule::DuringBackward), 2),
         0.0,
         {kRowGather}});
}

// The tied table is used by the first unit and the last: resident, and the head's gradient lands
// in the embedding's buffer.
// Layers whose AdamW runs on the device over state streamed from the host: each piece up and
// updated on the bulk h2d stream, down on the bulk d2h stream, through a ring of three slots; the
// next forward of the layer waits for its last piece.
TEST_F(StepProgramMirrorTest, OptimizerStateStreamedThroughTheDevice) {
  using test::make_plan;
  using test::streaming_optimizer;
  check({"layers 1 and 3 streamed beside layer 2 on the device and host units, clipped, in pieces",
         streaming_optimizer(make_plan(layout_, 4, 2, {0, 1, 5}, {0}, UpdateSchedule::AfterBackward, {3}),
                             layout_, {0, 2}, 1000),
         0.5,
         {kRowGather, kDeviceNormPartials, kDeviceNormSum}});
  check({"three sweeps, layers 2 and 3 streamed in one piece each, updates during the backward",
         test::in_sweeps(streaming_optimizer(make_plan(layout_, 4, 2, test::all_units(layout_), {},
                                                       UpdateSchedule::DuringBackward),
                                             layout_, {2, 3}, 0),
                         3),
         0.0,
         {kRowGather, kDeviceNormPartials}});
}

TEST_F(StepProgramMirrorTest, TiedEmbeddings) {
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["tie_word_embeddings"] = true;
  config_ = parse_model_config(json, "test");
  layout_ = build_model_layout(config_);
  rows_ = test::make_rows(config_.vocab_size, 6);
  ASSERT_EQ(config_.num_layers, 2);
  check({"tied table resident, head streamed",
         test::make_plan(layout_, 2, 2, {0}, {1}, UpdateSchedule::AfterBackward),
         1.0,
         {}});
  check({"tied table and head updated on the device",
         test::make_plan(layout_, 2, 2, {}, {}, UpdateSchedule::AfterBackward, {0, 3}),
         1.0,
         {kDeviceNormPartials, kDeviceNormSum}});
}

}  // namespace
}  // namespace ferry
