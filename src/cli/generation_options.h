// The options `ferry generate` and `ferry chat` share (model, device, sampling, template).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "generate/generation_session.h"

namespace ferry::cli {

// Registered on `cmd`; the strings that need converting are kept beside the options.
struct GenerationArgs {
  GenerateOptions options;
  std::string model, tokenizer, chat_template;
  std::vector<std::string> template_variables;
  double temperature = 0.0, top_p = 1.0;
  int64_t top_k = 0;
  // The sampling options, to tell a value given from one left to generation_config.json.
  CLI::Option *temperature_option = nullptr, *top_k_option = nullptr, *top_p_option = nullptr;

  void add_to(CLI::App* cmd);
  // The options with the converted values filled in.
  GenerateOptions resolve() const;
};

}  // namespace ferry::cli
