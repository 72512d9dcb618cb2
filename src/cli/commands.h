// Subcommands of the ferry executable. Each registers itself on the CLI11 app and runs from its
// callback; errors propagate as ferry::Error to main().
#pragma once

#include <CLI/CLI.hpp>

namespace ferry::cli {

void add_train_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);

// The process exit code chosen by the command that ran (0 unless it set one).
int exit_code();
void set_exit_code(int code);

}  // namespace ferry::cli
