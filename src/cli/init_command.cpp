#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "train/model_init.h"

namespace ferry::cli {

namespace {
// `ferry init` writes a new model; it never writes into or over what is already at --out (a real
// model, an earlier run), whose files would be replaced or mixed with random weights.
void refuse_existing_out(const std::filesystem::path& out) {
  std::error_code ec;
  if (!std::filesystem::exists(out, ec)) return;
  FERRY_CHECK(std::filesystem::is_directory(out, ec), "init",
              "--out {} exists and is not a directory; give a new path", out.string());
  FERRY_CHECK(
      std::filesystem::is_empty(out, ec), "init",
      "--out {} exists and is not empty; ferry init never writes over files: give a new path (e.g. {}-2) or "
      "remove the directory first",
      out.string(), out.string());
}
}  // namespace

void add_init_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "Write a randomly initialised Hugging Face model directory");
  struct Args {
    std::string arch, preset, out;
    uint64_t seed = 0;
    std::string dtype;
    bool list = false;
    bool config_only = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--arch", a->arch, "llama, mistral, qwen2 or qwen3")->required();
  cmd->add_option("--preset", a->preset, "model shape: tiny, or a real model's (see --list)");
  cmd->add_option("--out", a->out, "directory to create");
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "float32, bfloat16 or float16 (default: the preset's)");
  cmd->add_flag("--list", a->list, "list the presets of --arch");
  cmd->add_flag("--config-only", a->config_only,
                "write config.json and generation_config.json only, no weights (enough for ferry plan)");
  cmd->callback([a] {
    if (a->list) {
      for (const auto& p : model_presets(a->arch))
        std::printf("%-18s %s\n", p.name.c_str(), p.description.c_str());
      return;
    }
    FERRY_CHECK(!a->preset.empty(), "init", "give --preset (ferry init --arch {} --list shows them)",
                a->arch);
    FERRY_CHECK(!a->out.empty(), "init", "give --out DIR, the directory to create");
    refuse_existing_out(a->out);
    ModelConfig config = preset_config(a->arch, a->preset);
    if (!a->dtype.empty()) {
      DType d;
      FERRY_CHECK(parse_torch_dtype(a->dtype, &d) && (d == DType::F32 || d == DType::BF16 || d == DType::F16),
                  "init", "--dtype must be float32, bfloat16 or float16, got '{}'", a->dtype);
      nlohmann::json json = config.raw;
      json["torch_dtype"] = std::string(torch_dtype_name(d));
      config = parse_model_config(json, "preset " + a->preset);
    }
    if (a->config_only) {
      write_model_config_only(config, a->out);
      log_info("wrote {} ({} {}: config.json only, no weights)", a->out, a->arch, a->preset);
      return;
    }
    write_random_model(config, a->seed, a->out);
    log_info("wrote {} ({} {}, {})", a->out, a->arch, a->preset, torch_dtype_name(config.dtype));
  });
}

}  // namespace ferry::cli
