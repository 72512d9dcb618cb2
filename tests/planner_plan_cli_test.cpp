// `ferry plan` end to end: a tiny model made by `ferry init`, a synthetic machine profile saved as
// a file, and a config; the printed plan, prediction, memory and alternatives; the refusals that
// name the smallest budgets.
#include <gtest/gtest.h>

#include <fstream>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/profile.h"
#include "planner_shapes.h"
#include "profiler/machine_profiler.h"
#include "test_util.h"

namespace ferry {
namespace {

class PlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(test::ferry_binary())) << "build the ferry target first";
    std::string out;
    ASSERT_EQ(test::run_command(test::ferry_binary().string() + " init --arch llama --preset tiny --out " +
                                    (dir_ / "model").string(),
                                &out),
              0)
        << out;
    // The simulated device holds fp32 weights: the profile describes that shape.
    const ModelConfig model = load_model_config(dir_ / "model");
    MachineProfile profile = test::round_profile(model, 64, 4 * 64, 0.01, 1e9, 1e9);
    profile.weight_dtype = DType::F32;
    profile.shape_key = model_shape_key(model, 64, DType::F32);
    profile.device_memory_bytes = 1e9;
    profile.method = kProfilerMethod;
    save_profile(dir_ / "profile.json", profile);
    std::ofstream(dir_ / "train.yaml") << "model: model\n"
                                          "output_dir: out\n"
                                          "device: sim\n"
                                          "seq_len: 64\n"
                                          "global_batch: 4\n"
                                          "micro_batch: auto\n"
                                          "profile: profile.json\n"
                                          "gpu_memory: 64MiB\n"
                                          "host_memory: 1GiB\n"
                                          "max_steps: 1\n";
  }
  std::string plan(const std::string& overrides, int* status) {
    std::string out;
    *status = test::run_command(
        test::ferry_binary().string() + " plan " + (dir_ / "train.yaml").string() + " " + overrides, &out);
    return out;
  }
  // Llama-3.1-8B's config.json alone (`init --config-only`), in dir_/llama8b.
  void init_llama8b() {
    std::string out;
    ASSERT_EQ(test::run_command(test::ferry_binary().string() +
                                    " init --arch llama --preset llama-3.1-8b --config-only --out " +
                                    (dir_ / "llama8b").string(),
                                &out),
              0)
        << out;
  }
  test::ScratchDir dir_{"plan_cli"};
};

// Without a config file the key=value settings are the whole config: the same plan as the file's.
TEST_F(PlanCommandTest, KeyValueSettingsAloneAreTheConfig) {
  int status = -1;
  const std::string from_file = plan("", &status);
  ASSERT_EQ(status, 0) << from_file;
  std::string out;
  const std::string d = dir_.path().string();
  status = test::run_command(test::ferry_binary().string() + " plan model=" + d + "/model output_dir=" + d +
                                 "/out device=sim seq_len=64 global_batch=4 micro_batch=auto profile=" + d +
                                 "/profile.json gpu_memory=64MiB host_memory=1GiB max_steps=1",
                             &out);
  ASSERT_EQ(status, 0) << out;
  // The plan and its prediction (the memory beside the engine is each process's own, measured).
  const auto plan_lines = [](const std::string& text) {
    const size_t from = text.find("plan\n");
    return text.substr(from, text.find("memory (peak)") - from);
  };
  EXPECT_EQ(plan_lines(out), plan_lines(from_file));
}

TEST_F(PlanCommandTest, PrintsThePlanItsPredictionAndTheAlternatives) {
  int status = -1;
  const std::string out = plan("", &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* expected : {"profile: ",
                               "profile.json",
                               "budgets:   device 64.00 MiB",
                               "plan\n",
                               "slots",
                               "layers 0-1",
                               "boundary activations of layers",
                               "predicted step time",
                               "tokens/s",
                               "bottleneck: ",
                               "bound by",
                               "memory (peak)",
                               "GPU ",
                               "pinned ",
                               "pageable ",
                               "disk ",
                               "no disk tier",
                               "next best alternatives",
                               "instead of",
                               "plans simulated"})
    EXPECT_NE(out.find(expected), std::string::npos) << "missing '" << expected << "' in\n" << out;
}

// Without gpu_memory the plan is for what a run without it gets on the profiled device, which a
// profile measured under a budget records beside that budget, and says so; a profile from before
// that was recorded knows only its run's budget, and the plan says that too.
TEST_F(PlanCommandTest, WithoutGpuMemoryTheBudgetIsTheProfilesAndSaysSo) {
  int status = -1;
  const std::string old = plan("gpu_memory=auto", &status);
  ASSERT_EQ(status, 0) << old;
  EXPECT_NE(old.find("budgets:   device 953.67 MiB (no gpu_memory: the device memory the profile recorded, "
                     "its run's gpu_memory where that set one (a profile from before ferry recorded the "
                     "card's"),
            std::string::npos)
      << old;
  MachineProfile capped = load_profile(dir_ / "profile.json");
  capped.device_uncapped_memory_bytes = 2e9;  // measured in a run of gpu_memory 1e9 on a 2e9 card
  save_profile(dir_ / "capped.json", capped);
  EXPECT_EQ(load_profile(dir_ / "capped.json").device_uncapped_memory_bytes, 2e9);
  const std::string card = plan("gpu_memory=auto profile=" + (dir_ / "capped.json").string(), &status);
  ASSERT_EQ(status, 0) << card;
  EXPECT_NE(card.find("budgets:   device 1.86 GiB (no gpu_memory: the profiled device's free memory, what a "
                      "run without gpu_memory gets there"),
            std::string::npos)
      << card;
  const std::string budget = plan("", &status);
  ASSERT_EQ(status, 0) << budget;
  EXPECT_NE(budget.find("budgets:   device 64.00 MiB (gpu_memory, 5% kept free)"), std::string::npos)
      << budget;
}

// A CPU AdamW whose pass over the whole model takes 0.7x the step's layer forwards: with clipping
// the next forward waits for it (the embedding's update comes first), and `plan` says which setting
// would not: for this tiny model, whose steps have large fixed parts, four times the tokens.
TEST_F(PlanCommandTest, AGpuWaitingForTheCpuPassIsAdvised) {
  const ModelConfig model = load_model_config(dir_ / "model");
  const double params = static_cast<double>(build_model_layout(model).parameter_count());
  const double forward_s = 0.01 * static_cast<double>(model.num_layers);
  MachineProfile slow = test::round_profile(model, 64, 4 * 64, 0.01, 1e9, params / (0.7 * forward_s));
  slow.weight_dtype = DType::F32;
  slow.shape_key = model_shape_key(model, 64, DType::F32);
  slow.device_memory_bytes = 1e9;
  slow.method = kProfilerMethod;
  save_profile(dir_ / "slow_cpu.json", slow);
  int status = -1;
  const std::string out = plan("profile=" + (dir_ / "slow_cpu.json").string(), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("of the step waits for the CPU AdamW after the global norm (clipping); predicted with"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  global_batch: 16 (1024 tokens a step): "), std::string::npos) << out;
  // The machine of the other tests hides its pass: no advice.
  EXPECT_EQ(plan("", &status).find("waits for the CPU AdamW"), std::string::npos);
}

// A profile file that an older ferry measured plans all the same, with a warning that says how to
// measure it again; one of the current method plans without it.
TEST_F(PlanCommandTest, AProfileFromAnOlderFerryPlansWithAWarning) {
  MachineProfile old = load_profile(dir_ / "profile.json");
  old.method = kProfilerMethod - 1;
  save_profile(dir_ / "old.json", old);
  int status = -1;
  const std::string out = plan("profile=" + (dir_ / "old.json").string(), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("was measured by an older ferry"), std::string::npos) << out;
  EXPECT_NE(out.find("predicted step time"), std::string::npos) << out;
  EXPECT_EQ(plan("", &status).find("older ferry"), std::string::npos);
}

// A profile that took ferry's own attention kernels for a direction says so in the plan; one that
// kept the library's says nothing of attention.
TEST_F(PlanCommandTest, TheProfilesAttentionChoiceIsSaid) {
  MachineProfile own = load_profile(dir_ / "profile.json");
  own.compute.own_attention_forward = false;
  own.compute.own_attention_backward = true;
  save_profile(dir_ / "own_backward.json", own);
  int status = -1;
  const std::string out = plan("profile=" + (dir_ / "own_backward.json").string(), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("attention: the backward on ferry's own kernels"), std::string::npos) << out;
  EXPECT_EQ(plan("", &status).find("attention:"), std::string::npos);
}

// `ferry plan gpus=N` plans each device's share from the stored profile, without the devices; a
// profile that never measured collectives plans them with the fallback rate, and says so.
TEST_F(PlanCommandTest, SeveralDevicesArePlannedFromTheProfileWithTheCollectivesFallbackMarked) {
  int status = -1;
  const std::string out = plan("gpus=2", &status);
  ASSERT_EQ(status, 0) << out;
  for (const char* expected : {"devices:   2, each running 2 sequences", "FALLBACK, not measured",
                               "on each of 2 devices, one host state"})
    EXPECT_NE(out.find(expected), std::string::npos) << "missing '" << expected << "' in:\n" << out;
  const std::string odd = plan("gpus=2 global_batch=3", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(odd.find("multiple of gpus"), std::string::npos) << odd;
}

TEST_F(PlanCommandTest, ForcedOptionsShowInThePlan) {
  int status = -1;
  const std::string out = plan("gpu_slots=3 offload_activations=all micro_batch=2", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("3 slots"), std::string::npos) << out;
  EXPECT_NE(out.find("micro-batch 2"), std::string::npos) << out;
  EXPECT_NE(out.find("0-1 offloaded to the host"), std::string::npos) << out;
}

// keep_every: one boundary in K kept, the others recomputed; the plan names the kept ones, why,
// and what the recompute costs. A K below 1 is refused with what to write.
TEST_F(PlanCommandTest, AForcedKeepEveryShowsWhatItKeepsAndWhy) {
  int status = -1;
  const std::string out = plan("keep_every=2 offload_activations=all", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("one boundary in 2 kept (1 of 2 recomputed in the backward)"), std::string::npos) << out;
  EXPECT_NE(
      out.find("boundary activations: one in 2 kept, the others recomputed in the backward from the kept "
               "one below; kept: 0 offloaded to the host"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("why one boundary in 2 (keep_every, forced)"), std::string::npos) << out;
  EXPECT_NE(out.find("their recompute costs 1 layer forwards"), std::string::npos) << out;
  EXPECT_NE(out.find("model FLOPs utilisation"), std::string::npos) << out;
  const std::string bad = plan("keep_every=0", &status);
  EXPECT_NE(status, 0) << bad;
  EXPECT_NE(bad.find("keep_every must be a number of layers"), std::string::npos) << bad;
}

TEST_F(PlanCommandTest, RecomputeAllKeepsNoLayersInternals) {
  int status = -1;
  const std::string kept = plan("gpu_memory=1GiB", &status);
  ASSERT_EQ(status, 0) << kept;
  EXPECT_NE(kept.find("not recomputed"), std::string::npos)
      << kept;  // memory to spare: the planner keeps them
  const std::string out = plan("gpu_memory=1GiB recompute=all", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("not recomputed"), std::string::npos) << out;
  EXPECT_EQ(out.find("with their internals"), std::string::npos) << out;
  const std::string bad = plan("recompute=never", &status);
  EXPECT_EQ(status, 2) << bad;
  EXPECT_NE(bad.find("'recompute' must be one of"), std::string::npos) << bad;
}

TEST_F(PlanCommandTest, AForcedUpdateScheduleIsHonouredAndDuringBackwardRefusesClipping) {
  int status = -1;
  std::string out = plan("max_grad_norm=0 update_schedule=during-backward", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("updates during-backward"), std::string::npos) << out;
  out = plan("max_grad_norm=1 update_schedule=during-backward", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("max_grad_norm: 0"), std::string::npos) << out;
  out = plan("update_schedule=sometimes", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("'update_schedule' must be one of"), std::string::npos) << out;
}

TEST_F(PlanCommandTest, AForcedWeightUploadIsHonoured) {
  int status = -1;
  std::string out =
      plan("max_grad_norm=0 weight_upload=convert-on-upload update_schedule=during-backward", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("weights uploaded convert-on-upload"), std::string::npos) << out;
  EXPECT_NE(
      out.find(
          "weights uploaded as the fp32 masters (pinned), converted to F32 on the GPU; gradients land in a "
          "ring of 3 layer-sized pinned buffers"),
      std::string::npos)
      << out;
  EXPECT_EQ(out.find("with the bf16 copy this plan would need"), std::string::npos) << out;  // it was forced
  out = plan("weight_upload=bf16-host-shadow", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("weights uploaded bf16-host-shadow"), std::string::npos) << out;
  EXPECT_NE(out.find("weights uploaded from the bf16 copy the CPU AdamW writes into pinned memory"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("convert-on-upload"), std::string::npos) << out;  // not among the alternatives either
  out = plan("weight_upload=fp8", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("'weight_upload' must be one of"), std::string::npos) << out;
}

TEST_F(PlanCommandTest, ImpossibleBudgetsNameTheSmallestThatWork) {
  int status = -1;
  std::string out = plan("gpu_memory=64KiB", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("give gpu_memory of at least"), std::string::npos) << out;
  out = plan("host_memory=4KiB", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("give host_memory of at least"), std::string::npos) << out;
  EXPECT_EQ(out.find("gpu_memory of at least"), std::string::npos) << out;
  out = plan("device=cpu", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("without a plan"), std::string::npos) << out;
}

// `--nominal` plans the machine its rates describe: with `device: auto` on a machine without a GPU,
// the H200 (bf16 weights, GPU AdamW), not the simulated device. Llama-3.1-8B at 24 GiB fits there.
TEST_F(PlanCommandTest, NominalWithDeviceAutoPlansTheH200) {
  std::string out;
  ASSERT_NO_FATAL_FAILURE(init_llama8b());
  int status = -1;
  out = plan("--nominal model=" + (dir_ / "llama8b").string() +
                 " device=auto profile= gpu_memory=24GiB host_memory=128GiB seq_len=2048 global_batch=32",
             &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("device:    cuda"), std::string::npos) << out;
  EXPECT_NE(out.find("BF16"), std::string::npos) << out;
}

// A disk-bound plan's advice to raise global_batch comes with the larger steps that fit the same
// budgets, each the search's answer, in the lines `ferry plan` prints and `ferry train` logs
// (describe_disk): at 48 GiB of host the 8B keeps 26 layers' state on disk, and a step of 256
// sequences no longer fits though the hiding rule of thumb asks for 249.
TEST_F(PlanCommandTest, ADiskBoundPlanListsTheLargerStepsThatFit) {
  std::string out;
  ASSERT_NO_FATAL_FAILURE(init_llama8b());
  int status = -1;
  out = plan("--nominal model=" + (dir_ / "llama8b").string() +
                 " device=cuda profile= gpu_memory=24GiB host_memory=48GiB disk_memory=1TB disk_dir=" +
                 (dir_ / "disk").string() + " seq_len=2048 global_batch=32",
             &status);
  ASSERT_EQ(status, 0) << out;
  const size_t bound = out.find("disk-bound: ");
  ASSERT_NE(bound, std::string::npos) << out;
  EXPECT_NE(out.find("raise global_batch", bound), std::string::npos) << out;
  const size_t larger =
      out.find("larger steps under the same budgets (the plan keeps global_batch 32):", bound);
  ASSERT_NE(larger, std::string::npos) << out;
  const size_t first = out.find("global_batch 64 (131072 tokens/step): ", larger);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find("still disk-bound", first), std::string::npos) << out;
  EXPECT_NE(out.find("global_batch 256 (524288 tokens/step): no plan fits these budgets", first),
            std::string::npos)
      << out;
}

// A micro-batch the config fixes stands, but where the planner's own is predicted faster by more than
// kMicroBatchAdviceMargin the plan says so, with both predictions; the planner's own choice gets no
// such line.
TEST_F(PlanCommandTest, AFixedMicroBatchSlowerThanThePlannersIsNamed) {
  const std::string settings =
      "--nominal --preset llama/llama-3.2-1b device=cuda profile= gpu_memory=139GiB host_memory=120GiB "
      "seq_len=2048 global_batch=32";
  int status = -1;
  const std::string fixed = plan(settings + " micro_batch=1", &status);
  ASSERT_EQ(status, 0) << fixed;
  EXPECT_NE(fixed.find("micro-batch 1,"), std::string::npos) << fixed;
  const size_t advice = fixed.find("micro_batch 1 is the config's; micro_batch: auto would run micro-batch ");
  ASSERT_NE(advice, std::string::npos) << fixed;
  EXPECT_NE(fixed.find("tokens/s against ", advice), std::string::npos) << fixed;
  const std::string planners = plan(settings + " micro_batch=auto", &status);
  ASSERT_EQ(status, 0) << planners;
  EXPECT_EQ(planners.find("is the config's"), std::string::npos) << planners;
  // The advice names the micro-batch the planner picks, and its prediction.
  const size_t picked = planners.find("micro-batch ");
  ASSERT_NE(picked, std::string::npos) << planners;
  const std::string mb = planners.substr(picked, planners.find(',', picked) - picked);
  EXPECT_NE(fixed.find("would run " + mb + ":"), std::string::npos) << mb << "\n" << fixed;
}

// --preset plans a published shape without its files: the same plan as the config.json `init
// --config-only` writes for it, and without a config file at all.
TEST_F(PlanCommandTest, PresetPlansWithoutTheModelsFiles) {
  std::string out;
  ASSERT_NO_FATAL_FAILURE(init_llama8b());
  const std::string settings =
      " device=cuda profile= gpu_memory=24GiB host_memory=128GiB seq_len=2048 global_batch=32";
  int status = -1;
  const std::string from_dir = plan("--nominal model=" + (dir_ / "llama8b").string() + settings, &status);
  ASSERT_EQ(status, 0) << from_dir;
  const std::string from_preset = plan("--nominal --preset llama/llama-3.1-8b" + settings, &status);
  ASSERT_EQ(status, 0) << from_preset;
  EXPECT_NE(from_preset.find("model:     preset llama/llama-3.1-8b (LlamaForCausalLM, 32 layers"),
            std::string::npos)
      << from_preset;
  // The same plan and prediction (the memory beside the engine is measured, so it may differ).
  auto plan_part = [](const std::string& text) {
    const size_t begin = text.find("\nbatch:");
    return text.substr(begin, text.find("\nmemory (peak)") - begin);
  };
  EXPECT_EQ(plan_part(from_preset), plan_part(from_dir));
  EXPECT_NE(plan_part(from_preset).find("predicted step time"), std::string::npos) << from_preset;

  ASSERT_EQ(test::run_command(
                test::ferry_binary().string() + " plan --nominal --preset qwen3/qwen3-8b" + settings, &out),
            0)
      << out;
  EXPECT_NE(out.find("Qwen3ForCausalLM"), std::string::npos) << out;
  EXPECT_NE(test::run_command(test::ferry_binary().string() + " plan --nominal --preset llama", &out), 0);
  EXPECT_NE(out.find("--preset takes ARCH/NAME"), std::string::npos) << out;
}

// A stored profile of one preset shape plans another with --scale-profile (refused without it),
// says so, and predicts the evaluation a config asks for; --host-beside pins the process's memory.
TEST_F(PlanCommandTest, AScaledProfilePlansAnotherShapeAndTheEvaluation) {
  const std::string profile =
      (test::fixtures_dir().parent_path().parent_path() / "bench/profiles/h200-llama-3.1-8b-s2048.json")
          .string();
  const std::string settings = " --preset qwen3/qwen3-8b profile=" + profile +
                               " gpu_memory=24GB host_memory=128GiB seq_len=2048 global_batch=32";
  // Without a config file: the preset and the key=values are the whole run.
  const auto plan = [](const std::string& args, int* status) {
    std::string out;
    *status = test::run_command(test::ferry_binary().string() + " plan " + args, &out);
    return out;
  };
  int status = -1;
  std::string out = plan(settings, &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("was measured for the model shape"), std::string::npos) << out;
  out = plan("--scale-profile --host-beside 388MiB val_split=0.02 eval_steps=50" + settings, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("compute scaled by FLOPs from llama/llama-3.1-8b"), std::string::npos) << out;
  EXPECT_NE(out.find("beside    388.00 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("evaluation: every 50 steps and at the end (val_split 0.02 of the data), forward only, "
                     "predicted "),
            std::string::npos)
      << out;
  out = plan("--scale-profile" + settings, &status);  // no evaluation configured: no line
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("evaluation:"), std::string::npos) << out;
  out = plan("--scale-profile --nominal --preset qwen3/qwen3-8b gpu_memory=24GB", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--scale-profile carries a profile file"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
