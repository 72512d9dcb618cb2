#include "cli/commands.h"
#include "train/demo.h"

namespace ferry::cli {

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Fine-tune a tiny model on a checkable task and report accuracy");
  auto options = std::make_shared<DemoOptions>();
  auto out = std::make_shared<std::string>("demo-out");
  cmd->add_option("--out", *out, "working directory")->capture_default_str();
  cmd->add_option("--steps", options->steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--threads", options->threads, "CPU threads (0: all)")->capture_default_str();
  cmd->add_option("--seed", options->seed, "random seed")->capture_default_str();
  cmd->add_option("--lr", options->learning_rate, "peak learning rate")->capture_default_str();
  cmd->callback([options, out] {
    options->out_dir = *out;
    const DemoResult r = run_demo(*options);
    // The demo checks itself: fine-tuning must clearly raise the accuracy.
    set_exit_code(r.accuracy_after >= r.accuracy_before + 0.2 ? 0 : 1);
  });
}

}  // namespace ferry::cli
