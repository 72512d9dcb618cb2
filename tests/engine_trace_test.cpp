// The timeline trace of a training run on the simulated device (config `trace:`): the file is
// valid Chrome trace JSON with spans on the three streams, the host thread and the CPU updater,
// all inside the traced step's window and in order on each stream; tracing changes no bit of the
// training; the config keys and their refusals.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "engine/model_init.h"
#include "engine/train_config.h"
#include "engine/trainer.h"
#include "test_util.h"

namespace ferry {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
    std::vector<std::string> overrides = {"model=" + model_dir_.string(), "data=" + data_.string(),
                                          "output_dir=" + (scratch_ / out).string(), "seq_len=32",
                                          "global_batch=4", "micro_batch=2", "max_steps=4", "learning_rate=1e-3",
                                          "save_dtype=float32", "threads=2", "device=sim", "gpu_memory=3MiB",
                                          "gpu_slots=2", "resident_layers=0", "offload_activations=all"};
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

  std::map<int, std::string> tracks;  // tid -> name
  double step_begin = 0, step_end = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X" && e["cat"] == "step") {
      EXPECT_EQ(e["name"], "step 3");
      step_begin = e["ts"].get<double>();
      step_end = step_begin + e["dur"].get<double>();
    }
  }
  ASSERT_GT(step_end, step_begin);
  EXPECT_EQ(tracks.size(), 5u);

  // Per track and category, the spans in begin order; a stream runs one thing at a time.
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> by_track;
  std::map<std::string, std::map<std::string, int>> names;  // track -> span name -> count
  const double slack = 1e-3;                                 // microseconds: rounding of the conversion
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] == "step") continue;
    const std::string track = tracks.at(e["tid"].get<int>());
    const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
    EXPECT_GE(d, 0.0);
    EXPECT_GE(b, step_begin - slack) << e.dump();
    EXPECT_LE(b + d, step_end + slack) << e.dump();
    by_track[{track, e["cat"].get<std::string>()}].emplace_back(b, b + d);
    ++names[track][e["name"].get<std::string>()];
  }
  for (auto& [key, spans] : by_track) {
    if (key.first == "host" || key.first == "cpu update") continue;  // host scopes nest
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + slack) << key.first << " " << key.second << " span " << i;
  }
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
  EXPECT_GT(names["cpu update"]["adamw layer.0"] + names["cpu update"]["gradient norm layer.0"], 0);

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
  EXPECT_EQ(read_text(scratch_ / "plain" / "model.safetensors"), read_text(scratch_ / "traced" / "model.safetensors"));
  const nlohmann::json trace = nlohmann::json::parse(read_text(scratch_ / "t.json"));
  ASSERT_EQ(trace["otherData"]["steps"].size(), 3u);
  EXPECT_EQ(trace["otherData"]["steps"][2]["step"], 4);
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

}  // namespace
}  // namespace ferry
