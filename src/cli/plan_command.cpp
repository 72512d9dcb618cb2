// `ferry plan CONFIG.yaml [key=value ...]`: the plan `ferry train` would run with this config, its
// predicted step time and memory against the budgets, what bounds it, and the next best
// alternatives -- from the model's config.json and a machine profile alone (no weights, no GPU).
// With a budget no plan fits, the error names the smallest budgets that work.
//
// `ferry plan --preset llama/llama-3.1-8b [CONFIG.yaml] [key=value ...]` plans for a preset's shape
// (`ferry init --list` shows them), so that planning an 8B needs neither its weights nor its
// config.json. Without a file, the key=value settings are the whole config (model=DIR ...).
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "model/unit_layout.h"
#include "train/device_choice.h"
#include "train/model_source.h"
#include "train/plan_report.h"
#include "train/plan_selection.h"
#include "train/position_limit.h"
#include "train/train_config.h"

namespace ferry::cli {

namespace {

constexpr const char* kWhere = "plan";

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Show the plan `ferry train` would run, its predicted step time and memory: ferry plan CONFIG.yaml "
      "[key=value ...]");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto alternatives = std::make_shared<size_t>(4);
  auto nominal = std::make_shared<bool>(false);
  auto preset = std::make_shared<std::string>();
  auto scale = std::make_shared<bool>(false);
  auto beside = std::make_shared<std::string>();
  cmd->add_option("config", *config_path,
                  "YAML training configuration (see README: configuration); optional with --preset");
  cmd->add_option("overrides", *overrides, "key=value settings that override the file");
  cmd->add_option("--alternatives", *alternatives, "how many next best plans to show")->capture_default_str();
  cmd->add_flag(
      "--nominal", *nominal,
      "plan with the nominal rates of the lent H200 machine (DESIGN.md §5) instead of a measured profile");
  cmd->add_option("--preset", *preset,
                  "plan for a preset's shape, ARCH/NAME (ferry init --list shows them), instead of `model:`");
  cmd->add_flag(
      "--scale-profile", *scale,
      "with profile=FILE measured for another (preset) shape: scale its compute times to this model's "
      "shape by FLOPs instead of refusing it (the copy and CPU rates stay as measured)");
  cmd->add_option(
      "--host-beside", *beside,
      "host memory of the process beside the engine (runtime, data, allowance), e.g. 388MiB, instead of "
      "measuring this process: for plans that must not depend on the machine that prints them");
  cmd->callback([config_path, overrides, alternatives, nominal, preset, scale, beside] {
    // Without a config file, the first key=value lands where the file would be.
    std::error_code ec;
    if (config_path->find('=') != std::string::npos && !std::filesystem::exists(*config_path, ec)) {
      overrides->insert(overrides->begin(), *config_path);
      config_path->clear();
    }
    FERRY_CHECK(!config_path->empty() || !preset->empty() || !overrides->empty(), kWhere,
                "give a config file (ferry plan CONFIG.yaml), --preset ARCH/NAME, or the config as key=value "
                "(model=DIR ...)");
    // The preset stands for the file's `model:`, which then need not exist here (only its shape is read).
    if (!preset->empty()) overrides->push_back("model=preset:" + *preset);
    TrainConfig config = config_path->empty() ? parse_train_config("", *overrides, "command line")
                                              : load_train_config(*config_path, *overrides);
    ModelConfig model;
    if (!preset->empty()) {
      model = preset_model(*preset);
      config.model = "preset " + *preset;
    } else {
      FERRY_CHECK(
          !config.model.empty(), kWhere,
          "no model given; set `model:` to a Hugging Face model directory (only its config.json is read), or "
          "give --preset ARCH/NAME");
      model = model_source_config(config.model, config.seed);
    }
    // A plan is for sequences of seq_len tokens, and no documents are read here to say that none
    // is that long: positions past the model's are refused now, with the config.json edit that
    // allows them (training checks the packed documents themselves).
    check_seq_len_positions(model, config.seq_len);
    const ModelLayout layout = build_model_layout(model);
    const DeviceChoice choice = choose_device(config, *nominal ? DeviceUse::PlanNominal : DeviceUse::Plan);
    PlanTarget target = choice.target;
    std::string source;
    MachineProfile profile = plan_profile(config, model, choice, *nominal, &source, *scale);
    // The process train would be, less its loaded weights; for this machine, what it can give now.
    fill_host_target(target, 0, !*nominal && config.profile.empty());
    if (!beside->empty())
      target.host_beside_engine = static_cast<size_t>(parse_byte_size(*beside, "--host-beside", kWhere));
    fill_disk_target(target, config, !*nominal && config.profile.empty());
    // Without gpu_memory: what a run without it gets on the device the profile describes (its free
    // memory), recorded even where the profile was measured in a run with a budget; a profile from
    // before that was recorded knows only its run's budget.
    target.device_budget = choice.gpu_memory;
    if (choice.gpu_memory == 0) {
      const bool uncapped = !*nominal && profile.device_uncapped_memory_bytes > 0;
      target.device_budget =
          static_cast<size_t>(uncapped ? profile.device_uncapped_memory_bytes : profile.device_memory_bytes);
      target.device_budget_source =
          *nominal ? "no gpu_memory: the nominal H200's"
          : uncapped
              ? "no gpu_memory: the profiled device's free memory, what a run without gpu_memory gets there"
              : "no gpu_memory: the device memory the profile recorded, its run's gpu_memory where that "
                "set one (a profile from before ferry recorded the card's; measure it again for that)";
    }
    const PlanSelection s =
        select_plan(config, model, layout, target, std::move(profile), std::move(source), *alternatives);
    print_selection(config, model, layout, target, s);
  });
}

}  // namespace ferry::cli
