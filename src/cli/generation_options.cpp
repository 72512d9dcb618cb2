#include "cli/generation_options.h"

namespace ferry::cli {

void GenerationArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model, "Hugging Face model directory (a download, or a ferry run's output)")
      ->required();
  cmd->add_option("--device", options.device, "auto (a GPU when there is one), cpu or cuda")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", options.max_new_tokens, "most tokens of a reply")
      ->capture_default_str();
  temperature_option =
      cmd->add_option("--temperature", temperature,
                      "sampling temperature; 0 is greedy (default: generation_config.json's, else greedy)");
  top_k_option = cmd->add_option(
      "--top-k", top_k, "sample among the k likeliest tokens; 0: all (default: generation_config's)");
  top_p_option = cmd->add_option(
      "--top-p", top_p, "sample within this probability mass (default: generation_config's, else 1)");
  cmd->add_flag("--greedy", options.greedy,
                "always take the likeliest token, whatever generation_config says");
  cmd->add_option("--seed", options.seed, "seed of the sampling")->capture_default_str();
  cmd->add_option("--system", options.system, "a system message before the conversation");
  cmd->add_option("--context", options.context,
                  "tokens of KV cache (0: what the prompts and --max-new-tokens need; chat: up to 8192)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", tokenizer, "tokenizer directory (default: the model's)");
  cmd->add_option("--chat-template", chat_template, "a .jinja file replacing the model's chat template");
  cmd->add_option(
      "--template-var", template_variables,
      "a chat template variable NAME=VALUE (VALUE as JSON, else text), e.g. enable_thinking=false");
  cmd->add_option("--threads", options.threads, "CPU threads (0: all)")->capture_default_str();
}

GenerateOptions GenerationArgs::resolve() const {
  GenerateOptions o = options;
  o.model = model;
  o.prompt.tokenizer = tokenizer;
  o.prompt.chat_template = chat_template;
  for (const auto& v : template_variables) o.prompt.template_variables.push_back(parse_template_variable(v));
  if (temperature_option->count() > 0) o.temperature = temperature;
  if (top_k_option->count() > 0) o.top_k = top_k;
  if (top_p_option->count() > 0) o.top_p = top_p;
  return o;
}

}  // namespace ferry::cli
