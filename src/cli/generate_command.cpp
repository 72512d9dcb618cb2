#include <cstdio>

#include "cli/commands.h"
#include "cli/generation_options.h"
#include "core/error.h"

namespace ferry::cli {

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "generate", "Generate replies with a model: to one prompt, or to each conversation of a JSONL file");
  auto args = std::make_shared<GenerationArgs>();
  auto prompt = std::make_shared<std::string>();
  auto messages = std::make_shared<std::string>();
  args->add_to(cmd);
  auto* prompt_option = cmd->add_option("--prompt", *prompt, "the user's message (the reply goes to stdout)");
  auto* messages_option =
      cmd->add_option("--messages", *messages,
                      "a JSONL file, one list of {\"role\", \"content\"} messages a line; JSONL to stdout");
  prompt_option->excludes(messages_option);
  cmd->add_flag("--raw", args->options.raw, "give --prompt as plain text, without the chat template");
  cmd->callback([args, prompt, messages, prompt_option, messages_option] {
    FERRY_CHECK(prompt_option->count() + messages_option->count() == 1, "generate",
                "give --prompt TEXT or --messages FILE.jsonl (or use ferry chat to talk with the model)");
    const GenerateOptions o = args->resolve();
    if (prompt_option->count() > 0)
      generate_from_prompt(o, *prompt, stdout);
    else
      generate_from_messages(o, *messages, stdout);
  });
}

}  // namespace ferry::cli
