#include "cli/commands.h"
#include "engine/train_config.h"
#include "engine/trainer.h"

namespace ferry::cli {

namespace {
int g_exit_code = 0;
}

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Fine-tune a model: ferry train CONFIG.yaml [key=value ...]");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  cmd->add_option("config", *config_path, "YAML training configuration (see README: configuration)")->required();
  cmd->add_option("overrides", *overrides, "key=value settings that override the file");
  cmd->callback([config_path, overrides] {
    const TrainConfig config = load_train_config(*config_path, *overrides);
    const TrainSummary summary = run_training(config);
    set_exit_code(summary.finished ? 0 : 1);
  });
}

}  // namespace ferry::cli
