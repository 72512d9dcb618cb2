// The timeline trace of a training run on the simulated device (config `trace:`): the file is
// valid Chrome trace JSON with spans on the three streams, the host thread and the CPU updater,
// all inside the traced step's window and in order on each stream; tracing changes no bit of the
// training; the config keys and their refusals.
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "data/packing.h"
#include "device/trace/trace_span.h"
#include "device/trace/tracer.h"
#include "engine/sliding_engine.h"
#include "engine/step_batch.h"
#include "engine/step_trace.h"
#include "ops/device_ops.h"
#include "test_util.h"
#include "train/model_init.h"
#include "train/plan_selection.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Reads a trace file: for every stream track, its device spans (and separately its scope parents)
// in begin order must not overlap, and every span lies inside a traced step — except, with
// `outlast`, device work a step issues last (the device-side AdamW after the loss is read), which
// may run past the step's end. Returns, per track name, how often each span name occurs.
std::map<std::string, std::map<std::string, int>> check_trace(const nlohmann::json& trace,
                                                              bool outlast = false) {
  std::map<int, std::string> tracks;  // tid -> name
  std::vector<std::pair<double, double>> windows;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X" && e["cat"] == "step")
      windows.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_EQ(tracks.size(), static_cast<size_t>(kTraceTrackCount));  // every track named, used or not
  EXPECT_FALSE(windows.empty());
  const double slack = 1e-3;  // microseconds: rounding of the conversion
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> by_track;
  std::map<std::string, std::map<std::string, int>> names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] == "step") continue;
    const std::string track = tracks.at(e["tid"].get<int>());
    const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
    EXPECT_GE(d, 0.0);
    const bool device = e["cat"] != "host";
    const bool inside = std::any_of(windows.begin(), windows.end(), [&](const auto& w) {
      return b >= w.first - slack && (b + d <= w.second + slack || (outlast && device));
    });
    EXPECT_TRUE(inside) << e.dump();
    by_track[{track, e["cat"].get<std::string>()}].emplace_back(b, b + d);
    ++names[track][e["name"].get<std::string>()];
  }
  for (auto& [key, spans] : by_track) {
    if (key.first == "host" || key.first == "cpu update") continue;  // host scopes nest
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + slack)
          << key.first << " " << key.second << " span " << i;
  }
  return names;
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = scratch_ / "model";
    write_random_model(preset_config("llama", "tiny"), 3, model_dir_);
    data_ = scratch_ / "train.jsonl";
    std::mt19937_64 rng(5);
    std::ofstream out(data_);
    for (int d = 0; d < 64; ++d) {
      std::string ids;
      for (int i = 0; i < 30; ++i) ids += (i ? "," : "") + std::to_string(rng() % 300);
      out << "{\"input_ids\": [" << ids << "]}\n";
    }
  }
  TrainConfig config(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {"model=" + model_dir_.string(),
                                          "data=" + data_.string(),
                                          "output_dir=" + (scratch_ / out).string(),
                                          "seq_len=32",
                                          "global_batch=4",
                                          "micro_batch=2",
                                          "max_steps=4",
                                          "learning_rate=1e-3",
                                          "save_dtype=float32",
                                          "threads=2",
                                          "device=sim",
                                          "gpu_memory=3MiB",
                                          "gpu_slots=2",
                                          "resident_layers=0",
                                          "offload_activations=all"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }
  std::vector<double> train(const TrainConfig& c) {
    std::vector<double> losses;
    TrainHooks hooks;
    hooks.on_step = [&](const StepRecord& r) { losses.push_back(r.loss); };
    const LogLevel saved = log_level();
    set_log_level(LogLevel::Warn);
    const bool finished = run_training(c, hooks).finished;
    set_log_level(saved);
    EXPECT_TRUE(finished);
    return losses;
  }

  test::ScratchDir scratch_{"trace"};
  std::filesystem::path model_dir_, data_;
};

TEST_F(TraceTest, TracedStepIsAValidTimelineOfEveryTrack) {
  const auto path = scratch_ / "traces" / "run.json";
  train(config("traced", {"trace=" + path.string(), "trace_steps=3"}));
  ASSERT_TRUE(std::filesystem::exists(path));
  const nlohmann::json trace = nlohmann::json::parse(read_text(path));

  auto names = check_trace(trace);
  EXPECT_GT(names["compute"]["linear_forward"], 0);
  EXPECT_GT(names["compute"]["attention_backward"], 0);
  EXPECT_GT(names["compute"]["linear_cross_entropy"], 0);
  EXPECT_GT(names["compute"]["layer.0 forward"], 0);  // a scope parent
  EXPECT_GT(names["h2d"]["copy_to_device"], 0);
  EXPECT_GT(names["h2d"]["load layer.1"], 0);
  EXPECT_GT(names["d2h"]["copy_to_host"], 0);
  EXPECT_GT(names["d2h"]["gradients layer.1"], 0);
  EXPECT_GT(names["d2h"]["offload activation"], 0);
  EXPECT_GT(names["host"]["layer.1 backward"], 0);
  EXPECT_GT(names["host"]["synchronize"], 0);
  // The head's gradient lands first in the backward: the updater's norm work is under way well
  // before the step ends (which spans besides depends on the threads' timing).
  EXPECT_FALSE(names["cpu update"].empty());

  // The matrix products and attention carry their operands' shapes, by which a step's time is
  // summed per shape (tools/trace_idle.py --ops).
  std::map<std::string, std::string> details;
  for (const auto& e : trace["traceEvents"])
    if (e.contains("args") && e["args"].contains("detail"))
      details[e["name"].get<std::string>()] = e["args"]["detail"].get<std::string>();
  EXPECT_EQ(details["linear_forward"].rfind("x (", 0), 0u) << details["linear_forward"];
  EXPECT_NE(details["linear_forward"].find(", w ("), std::string::npos) << details["linear_forward"];
  EXPECT_NE(details["linear_backward"].find(", dw "), std::string::npos) << details["linear_backward"];
  EXPECT_EQ(details["attention_backward"].rfind("q (", 0), 0u) << details["attention_backward"];
  EXPECT_EQ(details.count("copy_to_device"), 0u) << "copies have bytes, not shapes";

  const auto& steps = trace["otherData"]["steps"];
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0]["step"], 3);
  const double idle = steps[0]["gpu_idle_percent"].get<double>();
  EXPECT_GE(idle, 0.0);
  EXPECT_LE(idle, 100.0);
  EXPECT_GT(steps[0]["h2d_busy_percent"].get<double>(), 0.0);
}

TEST_F(TraceTest, TracingChangesNoBit) {
  const std::vector<double> plain = train(config("plain"));
  const std::vector<double> traced =
      train(config("traced", {"trace=" + (scratch_ / "t.json").string(), "trace_steps=[1, 2, 4]"}));
  EXPECT_EQ(plain, traced);
  EXPECT_EQ(read_text(scratch_ / "plain" / "model.safetensors"),
            read_text(scratch_ / "traced" / "model.safetensors"));
  const nlohmann::json trace = nlohmann::json::parse(read_text(scratch_ / "t.json"));
  ASSERT_EQ(trace["otherData"]["steps"].size(), 3u);
  EXPECT_EQ(trace["otherData"]["steps"][2]["step"], 4);
  check_trace(trace);
}

// The engine with part of the optimizer on the device: the device AdamW's work shows on the compute
// track between the ops, one thing at a time.
TEST_F(TraceTest, DeviceOptimizerWorkIsOnTheComputeTrack) {
  const ModelConfig model = preset_config("llama", "tiny");
  const ModelLayout layout = build_model_layout(model);
  std::vector<std::vector<float>> units;
  init_random_weights(model, 3, units);
  Plan plan;
  plan.micro_batch = 2;
  plan.gpu_slots = 2;
  plan.weight_dtype = DType::F32;
  plan.grad_dtype = DType::F32;
  plan.units.assign(layout.units.size(), UnitPlacement::Streamed);
  plan.units[layout.embedding_unit()] = UnitPlacement::ResidentWithOptimizer;  // tied: must be resident
  plan.units[layout.head_unit()] = UnitPlacement::ResidentWithOptimizer;
  plan.activations.assign(static_cast<size_t>(model.num_layers), ActivationPlacement::OffloadToHost);

  std::mt19937_64 rng(9);
  std::vector<Document> documents(8);
  for (Document& d : documents)
    for (int i = 0; i < 30; ++i) {
      d.input_ids.push_back(static_cast<int32_t>(rng() % 300));
      d.labels.push_back(d.input_ids.back());
    }
  const std::vector<PackedRow> rows = pack_documents(documents, 32, true);
  std::vector<const PackedRow*> picked;
  for (int r = 0; r < 4; ++r) picked.push_back(&rows[static_cast<size_t>(r) % rows.size()]);
  const StepBatch batch = make_step_batch(picked, 32, 2);

  auto sim = make_sim_device({});
  const auto path = scratch_ / "engine.json";
  StepTrace trace(*sim, path, {2}, kTraceHostBytes);
  auto ops = make_device_ops(trace.device());
  SlidingEngine engine(model, layout, trace.device(), *ops, plan, 64, 2, false);
  for (size_t u = 0; u < units.size(); ++u) engine.host().unit(u).master.assign(units[u]);
  engine.weights_changed(0);
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Warn);
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  for (int64_t step = 1; step <= 3; ++step) {
    trace.begin(step);
    engine.step(step, batch, hyper, 1.0);
    trace.end();
  }
  set_log_level(saved);
  engine.finish_updates();

  auto names = check_trace(nlohmann::json::parse(read_text(path)), true);
  EXPECT_GT(names["compute"]["adamw"], 0);
  EXPECT_GT(names["compute"]["grad_sumsq_partials"], 0);
  EXPECT_GT(names["compute"]["linear_forward"], 0);
}

TEST_F(TraceTest, ConfigKeysAndRefusals) {
  EXPECT_EQ(config("a").trace_steps, std::vector<int64_t>{3});
  EXPECT_EQ(config("a", {"trace_steps=3,10"}).trace_steps, (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(config("a", {"trace_steps=[5]"}).trace_steps, std::vector<int64_t>{5});
  EXPECT_EQ(parse_train_config("trace: t.json\ntrace_steps: [2, 4]\n", {}, "yaml").trace_steps,
            (std::vector<int64_t>{2, 4}));
  EXPECT_THROW(config("a", {"trace_steps=0"}), Error);
  try {
    run_training(config("cpu", {"device=cpu", "trace=" + (scratch_ / "c.json").string()}));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device: sim or cuda"), std::string::npos) << e.what();
  }
}

// The plan gives a trace its host memory beside the engine (device/trace/tracer.h), and only a
// traced run.
TEST_F(TraceTest, ThePlanCountsTheTracesHostMemory) {
  PlanTarget target;
  target.host_beside_engine = size_t{300} << 20;
  EXPECT_EQ(plan_request(config("a"), target, 0.0).host_beside_engine, size_t{300} << 20);
  const std::string trace = "trace=" + (scratch_ / "t.json").string();
  EXPECT_EQ(plan_request(config("b", {trace}), target, 0.0).host_beside_engine,
            (size_t{300} << 20) + kTraceHostBytes);
  EXPECT_EQ(plan_request(config("c", {trace, "trace_memory=16MiB"}), target, 0.0).host_beside_engine,
            size_t{316} << 20);
  EXPECT_EQ(config("d", {"trace_memory=auto"}).trace_memory, static_cast<int64_t>(kTraceHostBytes));
  try {
    config("e", {trace, "trace_memory=1MiB"});
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace_memory: 1.00 MiB is less than the 4.00 MiB"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ferry
