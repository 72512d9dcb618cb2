// A run's output directory is checked and locked before any long work: never the model directory
// or inside it (nor containing it), never a fresh run over an earlier run's results unless asked,
// never two runs at once; and `ferry init` never writes over an existing directory.
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "io/completion_marker.h"
#include "tiny_run.h"
#include "train/checkpoint.h"
#include "train/output_dir_claim.h"
#include "train/run_evaluation.h"
#include "train/trainer.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::contains;
using test::error_of;

class OutputDirClaimTest : public test::TinyRun {};

TEST_F(OutputDirClaimTest, AnOutputInsideTheModelIsRefusedBeforeTheModelIsRead) {
  // Corrupt weights: had the model been read first, the error would be about them.
  std::ofstream(model_dir_ / "model.safetensors", std::ios::trunc) << "not safetensors";
  const auto model_bytes = test::tree_bytes(model_dir_);
  for (const fs::path& out : {model_dir_, model_dir_ / "out", model_dir_ / ".." / "model" / "sub" / ".."}) {
    const std::string message = error_of([&] { run_training(config("x", {"output_dir=" + out.string()})); });
    EXPECT_TRUE(contains(message, "[output_dir]") && contains(message, "inside")) << out << ": " << message;
  }
  EXPECT_TRUE(test::tree_bytes(model_dir_) == model_bytes) << "the model directory must be left as it was";
  EXPECT_FALSE(fs::exists(model_dir_ / "out"));
}

TEST_F(OutputDirClaimTest, AnOutputThatHoldsTheModelIsRefused) {
  const fs::path out = scratch_ / "runs";
  fs::create_directories(out);
  fs::rename(model_dir_, out / "base");
  const std::string message =
      error_of([&] { run_training(config("runs", {"model=" + (out / "base").string()})); });
  EXPECT_TRUE(contains(message, "lies inside output_dir")) << message;
  EXPECT_TRUE(fs::exists(out / "base" / "model.safetensors"));
}

TEST_F(OutputDirClaimTest, AFreshRunIntoAnEarlierRunsDirectoryIsRefusedUnlessOverwriting) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out"), stop);
  const auto before = test::tree_bytes(scratch_ / "out");

  const std::string message = error_of([&] { run_training(config("out")); });
  EXPECT_TRUE(contains(message, "not empty")) << message;
  EXPECT_TRUE(contains(message, "resume=true") && contains(message, "overwrite_output_dir=true")) << message;
  EXPECT_TRUE(test::tree_bytes(scratch_ / "out") == before) << "a refused run must not touch the directory";

  // overwrite_output_dir: the earlier run's checkpoints and metrics go; this run's steps alone remain.
  ASSERT_TRUE(run_training(config("out", {"overwrite_output_dir=true", "max_steps=1"})).finished);
  EXPECT_FALSE(find_latest_checkpoint(scratch_ / "out").has_value());
  const std::string metrics = test::read_file(scratch_ / "out" / "metrics.jsonl");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 1) << metrics;
}

TEST_F(OutputDirClaimTest, AUsersOtherFilesAlsoMakeADirectoryNonEmpty) {
  fs::create_directories(scratch_ / "mine");
  std::ofstream(scratch_ / "mine" / "notes.txt") << "keep me";
  EXPECT_TRUE(contains(error_of([&] { run_training(config("mine")); }), "notes.txt"));
  // Overwriting replaces the run's files and leaves the user's.
  ASSERT_TRUE(run_training(config("mine", {"overwrite_output_dir=true", "max_steps=1"})).finished);
  EXPECT_EQ(test::read_file(scratch_ / "mine" / "notes.txt"), "keep me");
}

// What saves that a stop interrupted leave beside the checkpoints and best/ is put right when the
// run resumes: the complete copy kept under its name, the partial ones removed (before they fill
// the disk run after run).
TEST_F(OutputDirClaimTest, AResumePutsRightWhatInterruptedSavesLeft) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  const std::vector<std::string> settings = {"val_split=0.1", "eval_steps=1", "save_best=true"};
  run_training(config("out", settings), stop);
  const fs::path out = scratch_ / "out";
  ASSERT_TRUE(is_marked_complete(out / "checkpoint-2"));
  ASSERT_TRUE(is_marked_complete(out / "best"));
  // A save of checkpoint-4 stopped halfway; a save of best/ stopped between its two renames.
  fs::copy(out / "checkpoint-2", out / "checkpoint-4.tmp", fs::copy_options::recursive);
  fs::remove(out / "checkpoint-4.tmp" / kCompleteMarker);
  fs::rename(out / "best", out / "best.old");
  fs::copy(out / "best.old", out / "best.tmp", fs::copy_options::recursive);
  fs::remove(out / "best.tmp" / kCompleteMarker);

  { const OutputDirLock lock = claim_output_dir(config("out", {"resume=true"})); }
  EXPECT_FALSE(fs::exists(out / "checkpoint-4.tmp"));
  EXPECT_TRUE(is_marked_complete(out / "best"));
  EXPECT_TRUE(fs::exists(out / "best" / kBestModelRecord));
  EXPECT_FALSE(fs::exists(out / "best.old"));
  EXPECT_FALSE(fs::exists(out / "best.tmp"));
  EXPECT_EQ(find_latest_checkpoint(out), out / "checkpoint-2");
  // The run goes on from checkpoint-2 to the end.
  std::vector<std::string> resume = settings;
  resume.push_back("resume=true");
  EXPECT_TRUE(run_training(config("out", resume)).finished);
}

// The tokenizer and template a run writes beside its model at the end are checked before it
// trains (pre-tokenized data reads neither), and before an earlier run's results are cleared.
TEST_F(OutputDirClaimTest, TokenizerAndTemplateOverridesAreCheckedBeforeTraining) {
  TrainHooks stop;
  stop.stop_after_steps = 2;
  run_training(config("out"), stop);
  const auto before = test::tree_bytes(scratch_ / "out");
  std::ofstream(scratch_ / "broken.jinja") << "{% for m in messages %}{{ m.content }}";  // no endfor
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"chat_template=" + (scratch_ / "missing.jinja").string(), "does not exist"},
      {"chat_template=" + (scratch_ / "broken.jinja").string(), "broken.jinja"},
      {"tokenizer=" + (scratch_ / "nowhere").string(), "neither a tokenizer.json nor a directory"},
  };
  for (const auto& [setting, expected] : cases) {
    const std::string message = error_of([&] {
      run_training(config("out", {"overwrite_output_dir=true", setting}));
    });
    EXPECT_TRUE(contains(message, expected)) << setting << ": " << message;
    EXPECT_TRUE(test::tree_bytes(scratch_ / "out") == before) << setting << ": the earlier run must stay";
  }
}

TEST_F(OutputDirClaimTest, ResumeAndOverwriteTogetherAreRefused) {
  EXPECT_TRUE(contains(error_of([&] {
                         config("out", {"resume=true", "overwrite_output_dir=true"});
                       }),
                       "set only one"));
}

TEST_F(OutputDirClaimTest, ALockedDirectoryNamesItsHolder) {
  fs::create_directories(scratch_ / "out");
  const std::string pid = "pid " + std::to_string(getpid());
  {
    OutputDirLock held(scratch_ / "out");
    EXPECT_TRUE(contains(error_of([&] { OutputDirLock second(scratch_ / "out"); }), pid));
    const std::string message = error_of([&] { run_training(config("out")); });
    EXPECT_TRUE(contains(message, "in use by another ferry run") && contains(message, pid)) << message;
    EXPECT_FALSE(fs::exists(scratch_ / "out" / "metrics.jsonl"));
  }
  EXPECT_FALSE(fs::exists(scratch_ / "out" / kOutputLockFile)) << "the lock file goes with the lock";
  OutputDirLock again(scratch_ / "out");
}

// Across processes, as two users' runs would meet: ferry train into a directory this test holds.
TEST_F(OutputDirClaimTest, ASecondFerryProcessIsRefused) {
  fs::create_directories(scratch_ / "out");
  std::ofstream(scratch_ / "train.yaml") << "model: " << model_dir_.string() << "\ndata: " << data_.string()
                                         << "\noutput_dir: out\nseq_len: 48\nglobal_batch: 4\nmax_steps: 2\n"
                                         << "device: cpu\nthreads: 1\n";
  OutputDirLock held(scratch_ / "out");
  std::string output;
  const int status = test::run_command(
      test::ferry_binary().string() + " train " + (scratch_ / "train.yaml").string(), &output);
  EXPECT_EQ(status, 2) << output;
  EXPECT_TRUE(contains(output, "pid " + std::to_string(getpid()))) << output;
}

TEST(InitCommandTest, RefusesAnExistingNonEmptyOut) {
  test::ScratchDir dir("init");
  fs::create_directories(dir / "taken");
  std::ofstream(dir / "taken" / "model.safetensors") << "someone's weights";
  std::string output;
  const std::string init = test::ferry_binary().string() + " init --arch llama --preset tiny --out ";
  EXPECT_EQ(test::run_command(init + (dir / "taken").string(), &output), 2) << output;
  EXPECT_TRUE(contains(output, "not empty") && contains(output, "new path")) << output;
  EXPECT_EQ(test::read_file(dir / "taken" / "model.safetensors"), "someone's weights");

  fs::create_directories(dir / "empty");  // an empty directory is as good as a new one
  EXPECT_EQ(test::run_command(init + (dir / "empty").string(), &output), 0) << output;
  EXPECT_TRUE(fs::exists(dir / "empty" / "config.json"));
}

}  // namespace
}  // namespace ferry
