// `ferry profile CONFIG.yaml [key=value ...]`: measures this machine's profile for the config's model
// shape and seq_len (ignoring the cache), prints it, and saves it to the cache and to --out.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/memory_ledger.h"
#include "model/unit_layout.h"
#include "ops/device_ops.h"
#include "profiler/machine_profiler.h"
#include "profiler/profile_report.h"
#include "train/device_choice.h"
#include "train/gemm_choice_cache.h"
#include "train/model_init.h"
#include "train/model_source.h"
#include "train/profile_cache.h"
#include "train/train_config.h"

namespace ferry::cli {

namespace {

constexpr const char* kWhere = "profile";

ModelConfig profiled_model(const TrainConfig& config, const std::string& preset) {
  if (!preset.empty()) {
    const size_t slash = preset.find('/');
    FERRY_CHECK(slash != std::string::npos, kWhere,
                "--preset must be ARCH/NAME, e.g. llama/llama-3.1-8b; got '{}'", preset);
    return preset_config(preset.substr(0, slash), preset.substr(slash + 1));
  }
  FERRY_CHECK(!config.model.empty(), kWhere,
              "no model given; set `model:` to a Hugging Face model directory (only its config.json is "
              "read), or give "
              "--preset ARCH/NAME");
  return model_source_config(config.model, config.seed);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "profile",
      "Measure this machine for a model shape (compute, copies, CPU AdamW, disk); print and save it");
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    std::string out, preset, disk_dir;
    bool no_disk = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("config", a->config, "YAML config: model, seq_len, device, gpu_memory, threads are read")
      ->required();
  cmd->add_option("overrides", a->overrides, "key=value settings that override the file");
  cmd->add_option("--out", a->out, "also save the profile here (e.g. bench/profiles/h200-SHAPE.json)");
  cmd->add_option("--preset", a->preset,
                  "profile a preset's shape instead of `model:` (ARCH/NAME, see ferry init --list)");
  cmd->add_option("--disk-dir", a->disk_dir, "directory whose disk is measured (default: the profile cache)");
  cmd->add_flag("--no-disk", a->no_disk, "skip the disk measurement");
  cmd->callback([a] {
    const TrainConfig config = load_train_config(a->config, a->overrides);
    if (config.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(config.threads));
    const DeviceChoice choice = choose_device(config, DeviceUse::Profile);
    const ModelConfig model = profiled_model(config, a->preset);
    std::unique_ptr<Device> device = make_chosen_device(choice);
    std::unique_ptr<Ops> ops = make_device_ops(*device);

    const std::filesystem::path cache_dir = default_profile_cache_dir();
    ProfileOptions options = default_profile_options(*device);
    options.measure_disk = !a->no_disk;
    options.disk_dir = a->disk_dir.empty() ? cache_dir : std::filesystem::path(a->disk_dir);
    if (options.measure_disk && options.disk_dir.empty()) {
      log_warn(
          "profile: no directory for the disk measurement (set FERRY_CACHE_DIR or give --disk-dir); skipped");
      options.measure_disk = false;
    }
    // The GEMM algorithms this machine's runs chose before are the ones timed, and any it chooses
    // now are kept for the runs after (train/gemm_choice_cache.h).
    GemmChoiceCache gemm_choices;
    gemm_choices.lend(*ops);
    const MachineProfile profile = measure_profile(*device, *ops, model, config.seq_len, options);
    gemm_choices.keep(*ops);
    print_profile(profile, model);
    // --out first: it is what was asked for; a cache that cannot be written only costs a later measurement.
    if (!a->out.empty()) {
      const std::filesystem::path out(a->out);
      if (out.has_parent_path()) std::filesystem::create_directories(out.parent_path());
      save_profile(out, profile);
      log_info("saved {}", out.string());
    }
    if (!cache_dir.empty()) {
      const auto path = profile_cache_path(cache_dir, profile.device_name, profile.shape_key);
      try {
        std::filesystem::create_directories(path.parent_path());
        save_profile(path, profile);
        log_info("saved {}", path.string());
      } catch (const std::exception& e) {
        log_warn("profile: not cached ({}); a training run on this machine will measure again", e.what());
      }
    }
  });
}

}  // namespace ferry::cli
