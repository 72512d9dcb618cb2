// Evaluation in a run: held-out rows through the run's own executor (the sliding engine on a
// device gives the CPU reference's bits), eval_steps and the end, metrics.jsonl, the best model,
// early stopping, and the settings it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tiny_run.h"
#include "train/metrics_log.h"
#include "train/run_evaluation.h"
#include "train/trainer.h"

namespace ferry {
namespace {

using test::contains;
using test::error_of;

// The (step, eval_loss) records of a metrics.jsonl.
std::vector<std::pair<int64_t, double>> eval_records(const std::filesystem::path& file) {
  std::vector<std::pair<int64_t, double>> records;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) records.emplace_back(j["step"].get<int64_t>(), j["eval_loss"].get<double>());
  }
  return records;
}

class RunEvaluationTest : public test::TinyRun {};

TEST_F(RunEvaluationTest, ValSplitEvaluatesAtEvalStepsAndTheEndWithTheReferenceBitsOnADevice) {
  const TrainSummary cpu = run_training(config("cpu", {"val_split=0.1", "eval_steps=2"}));
  const TrainSummary sim = run_training(
      config("sim", {"val_split=0.1", "eval_steps=2", "device=sim", "gpu_memory=3MiB", "gpu_slots=2"}));
  ASSERT_TRUE(cpu.finished && sim.finished);
  ASSERT_EQ(cpu.evals.size(), 3u);  // after steps 2, 4 and 6 (the last)
  ASSERT_EQ(sim.evals.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(cpu.evals[i].step, static_cast<int64_t>(2 * (i + 1)));
    EXPECT_EQ(cpu.evals[i].loss, sim.evals[i].loss) << "evaluation " << i;
    EXPECT_GT(cpu.evals[i].rows, 0);
    EXPECT_NEAR(cpu.evals[i].perplexity, std::exp(cpu.evals[i].loss), 1e-9);
  }
  // Training on random tokens at lr 1e-3 moves the held-out loss.
  EXPECT_NE(cpu.evals[0].loss, cpu.evals[2].loss);
  const auto records = eval_records(scratch_ / "cpu" / kMetricsFile);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[2].first, 6);
  EXPECT_EQ(records[2].second, cpu.evals[2].loss);
  // On a device the plan predicts the evaluations, and the time left before step 1 counts them.
  std::ifstream log_file(scratch_ / "sim" / "train.log");
  const std::string log((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(log, "every 2 steps and at the end, predicted ")) << log;
  EXPECT_TRUE(contains(log, " predicted for 6 steps and 3 evaluations")) << log;
}

TEST_F(RunEvaluationTest, HeldOutDocumentsLeaveTheTrainingData) {
  // An epoch of 108 of the 120 documents packs into fewer rows, so fewer steps, than one of all.
  const TrainSummary all = run_training(config("all", {"max_steps=0", "epochs=1"}));
  const TrainSummary split = run_training(config("split", {"val_split=0.1", "max_steps=0", "epochs=1"}));
  ASSERT_TRUE(all.finished && split.finished);
  EXPECT_LT(split.final_step, all.final_step);
  ASSERT_EQ(split.evals.size(), 1u);
  // The same documents every time with the same seed (resume relies on it), others with another.
  const TrainSummary again = run_training(config("again", {"val_split=0.1", "max_steps=2"}));
  const TrainSummary same = run_training(config("same", {"val_split=0.1", "max_steps=2"}));
  const TrainSummary other = run_training(config("other", {"val_split=0.1", "max_steps=2", "seed=5"}));
  EXPECT_EQ(same.evals[0].loss, again.evals[0].loss);
  EXPECT_NE(other.evals[0].loss, again.evals[0].loss);
}

TEST_F(RunEvaluationTest, EvalDataIsReadAsDataIs) {
  const std::filesystem::path held = scratch_ / "held.jsonl";
  test::write_token_data(held, 10, 320, 99);
  const TrainSummary summary = run_training(config("files", {"eval_data=" + held.string()}));
  ASSERT_TRUE(summary.finished);
  ASSERT_EQ(summary.evals.size(), 1u);  // at the end only
  EXPECT_EQ(summary.evals[0].step, 6);
  EXPECT_GT(summary.evals[0].rows, 0);
}

TEST_F(RunEvaluationTest, TheBestModelIsKeptBesideTheFinalOne) {
  const TrainSummary summary =
      run_training(config("best", {"val_split=0.1", "eval_steps=1", "save_best=true"}));
  ASSERT_TRUE(summary.finished);
  const EvalRecord* best = nullptr;
  for (const EvalRecord& e : summary.evals)
    if (best == nullptr || e.loss < best->loss) best = &e;
  ASSERT_NE(best, nullptr);
  const std::filesystem::path dir = scratch_ / "best" / kBestModelDir;
  ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(dir / "config.json"));
  const nlohmann::json record = nlohmann::json::parse(test::read_file(dir / kBestModelRecord));
  EXPECT_EQ(record["step"].get<int64_t>(), best->step);
  EXPECT_EQ(record["eval_loss"].get<double>(), best->loss);
}

TEST_F(RunEvaluationTest, TheBestModelOfAPresetIsSavedAndReplacedWhole) {
  // A preset has no model directory to copy files from; each better evaluation replaces best/
  // whole, and nothing is left beside it.
  TrainConfig c = config("preset-best", {"val_split=0.1", "eval_steps=1", "save_best=true"});
  c.model = "preset:qwen3/tiny";
  const TrainSummary summary = run_training(c);
  ASSERT_TRUE(summary.finished);
  const std::filesystem::path out = scratch_ / "preset-best", dir = out / kBestModelDir;
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "COMPLETE"));
  const nlohmann::json record = nlohmann::json::parse(test::read_file(dir / kBestModelRecord));
  const auto best =
      std::min_element(summary.evals.begin(), summary.evals.end(),
                       [](const EvalRecord& a, const EvalRecord& b) { return a.loss < b.loss; });
  ASSERT_NE(best, summary.evals.end());
  EXPECT_EQ(record["eval_loss"].get<double>(), best->loss);
  EXPECT_FALSE(std::filesystem::exists(out / "best.tmp"));
  EXPECT_FALSE(std::filesystem::exists(out / "best.old"));
}

TEST_F(RunEvaluationTest, PatienceEndsARunThatStopsImprovingAndWritesItsModel) {
  // At learning rate 0 the loss never moves: the first evaluation is the best, and two more
  // without a better one end the run after step 3 of 6.
  const TrainSummary summary = run_training(
      config("patience", {"val_split=0.1", "eval_steps=1", "early_stopping_patience=2", "learning_rate=0"}));
  EXPECT_TRUE(summary.finished);
  EXPECT_TRUE(summary.stopped_early);
  EXPECT_EQ(summary.final_step, 3);
  ASSERT_EQ(summary.evals.size(), 3u);
  EXPECT_EQ(summary.evals[0].loss, summary.evals[2].loss);
  EXPECT_TRUE(std::filesystem::exists(scratch_ / "patience" / "model.safetensors"));
}

TEST_F(RunEvaluationTest, ResumeKeepsEachStepsRecordAndItsEvaluationOnce) {
  const std::vector<std::string> settings = {"val_split=0.1", "eval_steps=2", "save_steps=2",
                                             "save_total_limit=0"};
  const TrainSummary full = run_training(config("full", settings));
  ASSERT_TRUE(full.finished);
  // Killed after step 6's records, before checkpoint-6: resumed from checkpoint-4.
  ASSERT_TRUE(run_training(config("cut", settings)).finished);
  std::filesystem::remove_all(scratch_ / "cut" / "checkpoint-6");
  std::vector<std::string> resume = settings;
  resume.push_back("resume=true");
  const TrainSummary resumed = run_training(config("cut", resume));
  ASSERT_TRUE(resumed.finished);
  EXPECT_EQ(test::metric_steps(scratch_ / "cut" / kMetricsFile),
            (std::vector<int64_t>{1, 2, 2, 3, 4, 4, 5, 6, 6}));
  EXPECT_EQ(eval_records(scratch_ / "cut" / kMetricsFile), eval_records(scratch_ / "full" / kMetricsFile));
}

TEST_F(RunEvaluationTest, SettingsWithoutEvaluationDataAreRefused) {
  EXPECT_TRUE(contains(error_of([&] { config("x", {"save_best=true"}); }), "need evaluation data"));
  EXPECT_TRUE(contains(error_of([&] { config("x", {"val_split=0.7"}); }), "between 0 and 0.5"));
  EXPECT_TRUE(contains(error_of([&] {
                         config("x", {"val_split=0.1", "early_stopping_patience=2"});
                       }),
                       "set eval_steps too"));
  EXPECT_TRUE(contains(error_of([&] { config("x", {"val_split=0.1", "eval_data=a.jsonl"}); }), "not both"));
}

}  // namespace
}  // namespace ferry
