// What a run leaves in its output directory when things go wrong: a resume after a crash keeps one
// metrics line per step; a corrupt or absurd trainer_state.json is refused, not trusted; an input
// that is an earlier run's output passes on only its model files; the final model is marked
// complete last; a full disk leaves the previous checkpoint and the input untouched.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "file_size_limit.h"
#include "io/completion_marker.h"
#include "tiny_run.h"
#include "train/checkpoint.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::contains;
using test::error_of;
using test::metric_steps;

class RunFilesTest : public test::TinyRun {};

TEST_F(RunFilesTest, ResumeCutsMetricsBackToTheCheckpoint) {
  ASSERT_TRUE(run_training(config("full")).finished);
  // A run killed after step 6's metrics line (half of step 7's written) and before checkpoint-6.
  ASSERT_TRUE(run_training(config("cut", {"save_steps=2", "save_total_limit=0"})).finished);
  fs::remove_all(scratch_ / "cut" / "checkpoint-6");
  unmark_complete(scratch_ / "cut");
  std::ofstream(scratch_ / "cut" / "metrics.jsonl", std::ios::app) << "{\"step\": 7, \"lo";

  ASSERT_TRUE(run_training(config("cut", {"save_steps=2", "save_total_limit=0", "resume=true"})).finished);
  EXPECT_EQ(metric_steps(scratch_ / "cut" / "metrics.jsonl"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(test::read_file(scratch_ / "cut" / "model.safetensors") ==
              test::read_file(scratch_ / "full" / "model.safetensors"))
      << "the weights differ";
}

// train.log holds the run's lines (a resumed run's continue it); config.yaml the settings, every
// key, and trains the same run when read back.
TEST_F(RunFilesTest, TheLogAndTheResolvedConfigAreWritten) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out", {"save_steps=2"}), stop);
  const std::string first = test::read_file(scratch_ / "out" / "train.log");
  EXPECT_TRUE(contains(first, "step 2/")) << first;
  EXPECT_TRUE(contains(first, "| epoch ")) << first;
  EXPECT_TRUE(contains(first, " elapsed, ETA ")) << first;
  ASSERT_TRUE(run_training(config("out", {"save_steps=2", "resume=true"})).finished);
  const std::string log = test::read_file(scratch_ / "out" / "train.log");
  EXPECT_EQ(log.rfind(first, 0), 0u) << "the resumed run's lines follow the first run's";
  EXPECT_TRUE(contains(log, "resumed from")) << log;
  EXPECT_TRUE(contains(log, "done: ")) << log;
  EXPECT_TRUE(contains(log, "final loss: ")) << log;
  EXPECT_TRUE(contains(log, "model: " + fs::absolute(scratch_ / "out").string())) << log;

  const TrainConfig written = load_train_config(scratch_ / "out" / "config.yaml", {});
  const TrainConfig given = config("out", {"save_steps=2", "resume=true"});
  EXPECT_EQ(written.model, given.model);
  EXPECT_EQ(written.data, given.data);
  EXPECT_EQ(written.seq_len, given.seq_len);
  EXPECT_EQ(written.learning_rate, given.learning_rate);
  EXPECT_EQ(written.save_steps, 2);
  EXPECT_TRUE(written.resume);
}

// A resume its checkpoint refuses (another batch geometry) leaves config.yaml as the run that
// made the checkpoint wrote it: the record of how to resume it.
TEST_F(RunFilesTest, ARefusedResumeKeepsTheSavedSettings) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out"), stop);
  const std::string saved = test::read_file(scratch_ / "out" / "config.yaml");
  const std::string message = test::error_of([&] {
    run_training(config("out", {"global_batch=8", "resume=true"}));
  });
  EXPECT_TRUE(contains(message, "restore the setting")) << message;
  EXPECT_EQ(test::read_file(scratch_ / "out" / "config.yaml"), saved);
}

// The input model deleted while the run trains: its trained weights are still saved.
TEST_F(RunFilesTest, AnInputModelDeletedDuringTheRunDoesNotLoseIt) {
  TrainHooks hooks;
  hooks.on_step = [&](const StepRecord&) { fs::remove_all(model_dir_); };
  ASSERT_TRUE(run_training(config("out", {"save_steps=2"}), hooks).finished);
  EXPECT_TRUE(is_marked_complete(scratch_ / "out"));
  EXPECT_TRUE(fs::exists(scratch_ / "out" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(scratch_ / "out" / "config.json"));
  EXPECT_TRUE(is_marked_complete(scratch_ / "out" / "checkpoint-6"));
}

TEST_F(RunFilesTest, AnAbsurdTrainerStateIsRefused) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out"), stop);
  const fs::path state_file = scratch_ / "out" / "checkpoint-2" / "trainer_state.json";
  const nlohmann::json good = nlohmann::json::parse(test::read_file(state_file));
  const nlohmann::json bad_steps[] = {1e15, -1, 2.5, "2", nullptr, int64_t{3}};
  for (const nlohmann::json& step : bad_steps) {
    nlohmann::json state = good;
    state["step"] = step;
    std::ofstream(state_file, std::ios::trunc) << state.dump();
    const std::string message = error_of([&] { run_training(config("out", {"resume=true"})); });
    EXPECT_TRUE(contains(message, "trainer_state.json")) << step << ": " << message;
    EXPECT_FALSE(fs::exists(scratch_ / "out" / "model.safetensors"))
        << step << ": nothing may be written as final";
  }
  // Fields missing or of another type: named, with what to do (a fingerprint of another type would
  // compare nothing, so the run would resume unchecked).
  const std::vector<std::pair<std::string, nlohmann::json>> bad_fields = {
      {"data_position.index",
       [&] {
         nlohmann::json s = good;
         s["data_position"].erase("index");
         return s;
       }()},
      {"data_position",
       [&] {
         nlohmann::json s = good;
         s["data_position"] = 3;
         return s;
       }()},
      {"fingerprint",
       [&] {
         nlohmann::json s = good;
         s["fingerprint"] = "x";
         return s;
       }()},
  };
  for (const auto& [name, bad] : bad_fields) {
    std::ofstream(state_file, std::ios::trunc) << bad.dump();
    const std::string message = error_of([&] { run_training(config("out", {"resume=true"})); });
    EXPECT_TRUE(contains(message, "'" + name + "' is missing or of another type") &&
                contains(message, "resume from an earlier checkpoint"))
        << name << ": " << message;
  }
  // A step past the run's end, under its own name, is a different mistake with its own advice.
  nlohmann::json state = good;
  state["step"] = int64_t{1000000000000000};
  std::ofstream(state_file, std::ios::trunc) << state.dump();
  fs::rename(scratch_ / "out" / "checkpoint-2", scratch_ / "out" / "checkpoint-1000000000000000");
  const std::string message = error_of([&] { run_training(config("out", {"resume=true"})); });
  EXPECT_TRUE(contains(message, "past this run's 6 steps") && contains(message, "max_steps")) << message;
  EXPECT_FALSE(fs::exists(scratch_ / "out" / "model.safetensors"));
}

// resume=true in a directory of a run over other data must not continue that run's checkpoint.
TEST_F(RunFilesTest, ResumeRefusesAnotherRunsCheckpoint) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out"), stop);
  test::write_token_data(scratch_ / "other.jsonl", 120, 320, 99);
  const std::string message = error_of([&] {
    run_training(config("out", {"resume=true", "data=" + (scratch_ / "other.jsonl").string()}));
  });
  EXPECT_TRUE(contains(message, "cannot resume exactly")) << message;
  EXPECT_EQ(metric_steps(scratch_ / "out" / "metrics.jsonl"), (std::vector<int64_t>{1, 2}));
}

TEST_F(RunFilesTest, AnEarlierOutputAsInputPassesOnlyItsModelFiles) {
  ASSERT_TRUE(run_training(config("first", {"max_steps=3", "save_steps=1"})).finished);
  const fs::path first = scratch_ / "first";
  std::ofstream(first / "README.md") << "# model card\n";
  std::ofstream(first / "LICENSE.txt") << "licence\n";
  std::ofstream(first / "notes.txt") << "a user's notes\n";
  std::ofstream(first / "trainer_state.json") << "{}";
  fs::create_directories(first / "additional_chat_templates");
  std::ofstream(first / "additional_chat_templates" / "tool_use.jinja") << "{{ tools }}";

  ASSERT_TRUE(run_training(config("second", {"model=" + first.string(), "max_steps=1"})).finished);
  const fs::path second = scratch_ / "second";
  EXPECT_EQ(metric_steps(second / "metrics.jsonl"), (std::vector<int64_t>{1}))
      << "this run's metrics, not the input's";
  for (const char* copied : {"tokenizer.json", "generation_config.json", "README.md", "LICENSE.txt",
                             "additional_chat_templates/tool_use.jinja"})
    EXPECT_EQ(test::read_file(second / copied), test::read_file(first / copied)) << copied;
  for (const char* left : {"notes.txt", "trainer_state.json", "optimizer.safetensors", ".ferry.lock"})
    EXPECT_FALSE(fs::exists(second / left)) << left;
  EXPECT_FALSE(find_latest_checkpoint(second).has_value()) << "no checkpoint of the input's run";
  EXPECT_TRUE(is_marked_complete(second));
}

TEST_F(RunFilesTest, TheFinalModelIsMarkedCompleteAndACheckpointStaysAsItWas) {
  ASSERT_TRUE(run_training(config("out", {"save_steps=3"})).finished);
  EXPECT_TRUE(is_marked_complete(scratch_ / "out"));
  EXPECT_TRUE(test::temporaries(scratch_ / "out").empty());
  EXPECT_EQ(find_latest_checkpoint(scratch_ / "out"), scratch_ / "out" / "checkpoint-6");
}

// A tool given a run's output directory as its model says when that run never finished writing it.
TEST_F(RunFilesTest, ToolsWarnAboutAnOutputWithoutItsMarker) {
  ASSERT_TRUE(run_training(config("out", {"max_steps=1"})).finished);
  const std::string eval = test::ferry_binary().string() + " eval --seq-len 48 --max-rows 2 --model " +
                           (scratch_ / "out").string() + " --data " + data_.string();
  std::string output;
  ASSERT_EQ(test::run_command(eval, &output), 0) << output;
  EXPECT_FALSE(contains(output, "has not finished writing")) << output;
  unmark_complete(scratch_ / "out");
  ASSERT_EQ(test::run_command(eval, &output), 0) << output;
  EXPECT_TRUE(contains(output, "has not finished writing its model")) << output;
}

// A checkpoint that does not fit: a clear error naming it and the intact one before it; no
// partial files; the input model untouched; and resume later continues exactly.
TEST_F(RunFilesTest, ADiskFullCheckpointLeavesThePreviousOneIntact) {
  ASSERT_TRUE(run_training(config("full")).finished);
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out", {"save_steps=2"}), stop);
  const fs::path out = scratch_ / "out";
  const auto checkpoint_bytes = test::tree_bytes(out / "checkpoint-2");
  const auto model_bytes = test::tree_bytes(model_dir_);
  // Room for the checkpoint's model.safetensors, not for its optimizer state (three times larger).
  const uint64_t room = fs::file_size(out / "checkpoint-2" / "model.safetensors") + 4096;

  std::string message;
  {
    test::FileSizeLimit limit(room);
    message = error_of([&] { run_training(config("out", {"save_steps=2", "resume=true"})); });
  }
  EXPECT_TRUE(contains(message, "checkpoint-4") && contains(message, "EFBIG")) << message;
  EXPECT_TRUE(contains(
      message, "the newest complete checkpoint, " + (out / "checkpoint-2").string() + ", are untouched"))
      << message;
  EXPECT_TRUE(test::tree_bytes(out / "checkpoint-2") == checkpoint_bytes);
  EXPECT_TRUE(test::tree_bytes(model_dir_) == model_bytes);
  EXPECT_TRUE(test::temporaries(out).empty()) << test::temporaries(out).front();
  EXPECT_FALSE(fs::exists(out / "checkpoint-4"));
  EXPECT_EQ(find_latest_checkpoint(out), out / "checkpoint-2");

  ASSERT_TRUE(run_training(config("out", {"save_steps=2", "resume=true"})).finished);
  EXPECT_TRUE(test::read_file(out / "model.safetensors") ==
              test::read_file(scratch_ / "full" / "model.safetensors"))
      << "the weights differ";
  EXPECT_EQ(metric_steps(out / "metrics.jsonl"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST_F(RunFilesTest, ADiskFullFinalSaveIsNotMarkedComplete) {
  std::string message;
  {
    test::FileSizeLimit limit(64 * 1024);  // the tiny model's weights are ~0.5 MB in float32
    message = error_of([&] { run_training(config("out", {"max_steps=1"})); });
  }
  EXPECT_TRUE(contains(message, "writing the model into") && contains(message, "EFBIG")) << message;
  // The run saved no checkpoint: the message must not send the user to resume=true.
  EXPECT_TRUE(contains(message, "no complete checkpoint to resume from")) << message;
  EXPECT_FALSE(contains(message, "resume=true")) << message;
  EXPECT_FALSE(is_marked_complete(scratch_ / "out"));
  EXPECT_FALSE(fs::exists(scratch_ / "out" / "model.safetensors"));
  EXPECT_TRUE(test::temporaries(scratch_ / "out").empty());
}

}  // namespace
}  // namespace ferry
