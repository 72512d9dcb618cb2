// ferry's command line: `ferry train | init | eval | generate | chat | demo | tokenize | plan | profile`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ferry: full-parameter fine-tuning of large language models on GPUs smaller than the model"};
  app.set_version_flag("--version", std::string("ferry ") + FERRY_VERSION);
  app.require_subcommand(1);
  ferry::cli::add_train_command(app);
  ferry::cli::add_init_command(app);
  ferry::cli::add_eval_command(app);
  ferry::cli::add_demo_command(app);
  ferry::cli::add_tokenize_command(app);
  ferry::cli::add_plan_command(app);
  ferry::cli::add_profile_command(app);
  ferry::cli::add_generate_command(app);
  ferry::cli::add_chat_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ferry::Error& e) {
    std::fprintf(stderr, "ferry: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: unexpected error: %s\n", e.what());
    return 3;
  }
  return ferry::cli::exit_code();
}
