#include <cstdio>

#include "cli/commands.h"
#include "cli/generation_options.h"

namespace ferry::cli {

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "chat", "Talk with a model: one line a turn, the conversation kept; /reset, /exit, or Ctrl-D to end");
  auto args = std::make_shared<GenerationArgs>();
  args->add_to(cmd);
  cmd->callback([args] { chat(args->resolve(), stdin, stdout); });
}

}  // namespace ferry::cli
