#include <cstdio>

#include "cli/commands.h"
#include "train/evaluate.h"

namespace ferry::cli {

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Loss and perplexity of a model on data as `ferry train` reads it");
  auto o = std::make_shared<EvalOptions>();
  auto data = std::make_shared<std::vector<std::string>>();
  auto model = std::make_shared<std::string>();
  auto dump = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "Hugging Face model directory")->required();
  cmd->add_option("--data", *data,
                  "data files: pre-tokenized JSONL (input_ids, optional labels) or text formats")
      ->required();
  cmd->add_option("--data-format", o->data_format, "as train's data_format")->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer directory or tokenizer.json (default: the model's)");
  cmd->add_option("--chat-template", o->chat_template, "a .jinja file replacing the tokenizer's template");
  cmd->add_flag("--train-on-prompt", o->train_on_prompt, "count every token, not only the assistant's");
  cmd->add_option("--cache-dir", o->cache_dir,
                  "cache of tokenized text (default: $FERRY_CACHE_DIR/data or ~/.cache/ferry/data)");
  cmd->add_option("--seq-len", o->seq_len, "tokens per sequence")->capture_default_str();
  cmd->add_option("--micro-batch", o->micro_batch, "sequences per forward pass")->capture_default_str();
  cmd->add_option(
         "--packing-strategy", o->packing_strategy,
         "as train's packing_strategy: auto (best_fit for chat and instruction data, split for plain "
         "text), best_fit or split")
      ->capture_default_str();
  cmd->add_flag(
      "--no-packing", [o](int64_t) { o->packing = false; }, "one document per sequence, padded");
  cmd->add_option("--max-rows", o->max_rows, "evaluate at most this many sequences (0: all)")
      ->capture_default_str();
  cmd->add_option("--dump-logits", *dump, "write input_ids, position_ids and logits of the first rows here");
  cmd->add_option("--dump-rows", o->dump_rows, "rows to dump")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0: all)")->capture_default_str();
  cmd->add_option("--device", o->device,
                  "auto (a GPU where one answers, else the fp32 reference on the CPU), cpu, sim or cuda")
      ->capture_default_str();
  cmd->add_option("--gpu-memory", o->gpu_memory,
                  "bound the GPU's memory, as train's gpu_memory (e.g. 24GiB)");
  cmd->callback([o, data, model, dump] {
    o->model = *model;
    o->dump_logits = *dump;
    o->data.assign(data->begin(), data->end());
    const EvalResult r = run_eval(*o);
    std::printf(
        "{\"loss\": %.6f, \"perplexity\": %.4f, \"rows\": %lld, \"tokens\": %lld, \"packing\": \"%s\"}\n",
        r.loss, r.perplexity, static_cast<long long>(r.rows), static_cast<long long>(r.counted_tokens),
        packing_mode_name(r.packing));
  });
}

}  // namespace ferry::cli
