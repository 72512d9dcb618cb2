#include <cstdio>

#include "cli/commands.h"
#include "core/stop_signals.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace ferry::cli {

namespace {
int g_exit_code = 0;

// One word of a shell command line: quoted when the shell would split or expand it.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+=.,/:@%") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

bool sets_key(const std::string& override_text, const std::string& key) {
  return override_text.rfind(key + "=", 0) == 0;
}

// The command that continues a stopped run: the same config and overrides, with resume=true in
// place of any resume= or overwrite_output_dir= given (overwriting would discard the checkpoint).
std::string resume_command(const std::string& config_path, const std::vector<std::string>& overrides,
                           const TrainConfig& config) {
  std::string command = "ferry train " + shell_word(config_path);
  for (const std::string& o : overrides)
    if (!sets_key(o, "resume") && !sets_key(o, "overwrite_output_dir")) command += " " + shell_word(o);
  if (config.overwrite_output_dir) command += " overwrite_output_dir=false";  // set in the file
  return command + " resume=true";
}
}  // namespace

int exit_code() {
  return g_exit_code;
}
void set_exit_code(int code) {
  g_exit_code = code;
}

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Fine-tune a model: ferry train CONFIG.yaml [key=value ...]");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  cmd->add_option("config", *config_path, "YAML training configuration (see README: configuration)")
      ->required();
  cmd->add_option("overrides", *overrides, "key=value settings that override the file");
  cmd->callback([config_path, overrides] {
    const TrainConfig config = load_train_config(*config_path, *overrides);
    // SIGINT/SIGTERM/SIGHUP stop the run at the next step boundary, with a checkpoint.
    StopSignals signals;
    TrainHooks hooks;
    hooks.stop_signal = &signals.received();
    const TrainSummary summary = run_training(config, hooks);
    if (summary.stop_signal != 0) {
      std::fprintf(stderr, "ferry: stopped after step %lld; to resume: %s\n",
                   static_cast<long long>(summary.final_step),
                   resume_command(*config_path, *overrides, config).c_str());
      set_exit_code(128 + summary.stop_signal);  // as a shell reports a process killed by the signal
      return;
    }
    set_exit_code(summary.finished ? 0 : 1);
  });
}

}  // namespace ferry::cli
