#include "fuzz_targets.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "fault_inputs.h"
#include "io/safetensors.h"
#include "jinja/template.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "mutator.h"
#include "published_configs.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/train_config.h"

namespace ferry::faults {

namespace {

using nlohmann::json;

// ---- safetensors ----

void run_safetensors_file(std::string_view bytes) {
  parse_safetensors_layout(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "fuzz.safetensors");
}

// The header alone, framed with a correct length and 64 bytes of data, so that structural JSON
// edits reach the checks of entries, shapes and offsets.
void run_safetensors_header(std::string_view header) {
  run_safetensors_file(safetensors_bytes(std::string(header), std::string(64, '\x11')));
}

std::vector<std::string> safetensors_file_seeds() {
  return {valid_safetensors(),
          safetensors_bytes(R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},)"
                            R"( "ids": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},)"
                            R"( "s": {"dtype": "F16", "shape": [], "data_offsets": [16, 18]}})",
                            std::string(18, '\x3c'))};
}

std::vector<std::string> safetensors_header_seeds() {
  return {
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "b": {"dtype": "F64", "shape": [5], "data_offsets": [24, 64]}})",
      R"({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]},)"
      R"( "z": {"dtype": "F32", "shape": [0, 7], "data_offsets": [32, 32]}})"};
}

// ---- config.json ----

void run_config_json(std::string_view bytes) {
  const ModelConfig config =
      parse_model_config(parse_json(bytes, "config", "config.json", "fix it"), "config.json");
  build_model_layout(config);
  model_config_to_json(config);
  rope_inv_freq(config);
}

std::vector<std::string> config_json_seeds() {
  std::vector<std::string> seeds(std::begin(test::published_configs::kAll),
                                 std::end(test::published_configs::kAll));
  // Qwen's sliding-window keys, which the published config leaves off.
  json qwen = json::parse(test::published_configs::kQwen25_7B);
  qwen["use_sliding_window"] = true;
  qwen["max_window_layers"] = 0;
  seeds.push_back(qwen.dump());
  return seeds;
}

// ---- tokenizer.json and tokenizer_config.json ----

// What a loaded tokenizer is used for: encoding (with its normalizer, pre-tokenizer, model and
// post-processor) and decoding.
void exercise(const Tokenizer& tokenizer) {
  const std::vector<int32_t> ids = tokenizer.encode("Hello, world! 123 <|im_end|> caf\xC3\xA9", true);
  tokenizer.decode(ids, true);
  tokenizer.decode({0, 5, 300, -1, 1 << 30}, false);
}

void run_tokenizer_json(std::string_view bytes) {
  exercise(Tokenizer::from_json(bytes, tiny_tokenizer_config_json()));
}

std::vector<std::string> tokenizer_json_seeds() {
  json sentencepiece = json::parse(tiny_tokenizer_json());
  sentencepiece["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  sentencepiece["pre_tokenizer"] = nullptr;
  sentencepiece["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return {tiny_tokenizer_json(), sentencepiece.dump()};
}

void run_tokenizer_config_json(std::string_view bytes) {
  static const std::string tokenizer = tiny_tokenizer_json();
  exercise(Tokenizer::from_json(tokenizer, bytes));
  const json config = parse_json(bytes, "chat_template", "tokenizer_config.json", "fix it");
  const auto source = ChatTemplate::template_from_config(config, "tokenizer_config.json");
  if (source)
    ChatTemplate(*source, "tokenizer_config.json", ChatTemplate::special_tokens_from_config(config));
}

std::vector<std::string> tokenizer_config_json_seeds() {
  json with_template = json::parse(tiny_tokenizer_config_json());
  with_template["chat_template"] = chat_template_source();
  with_template["additional_special_tokens"] = {"<|im_start|>", "<|im_end|>"};
  json named = json::parse(tiny_tokenizer_config_json());
  named["chat_template"] = {{{"name", "default"}, {"template", "{{ messages[0].content }}"}},
                            {{"name", "tool_use"}, {"template", "{{ tools }}"}}};
  named["eos_token"] = {{"content", "<|im_end|>"}, {"lstrip", false}};
  return {tiny_tokenizer_config_json(), with_template.dump(), named.dump()};
}

// ---- training data ----

// A data file of these bytes through the loader that training uses: record splitting, JSON,
// format detection, chat rendering, tokenization. skip_malformed is on for inputs of odd length,
// so both ways of reporting a bad record run.
void run_jsonl_records(std::string_view bytes) {
  static const test::ScratchDir dir("fuzz-data");  // removed at exit
  static const std::filesystem::path path = dir / "records.jsonl";
  write_bytes(path, bytes);
  TextDataOptions options = data_setup().options();
  options.skip_malformed = bytes.size() % 2 == 1;
  load_text_documents({path}, options);
}

std::vector<std::string> jsonl_records_seeds() {
  std::vector<std::string> seeds = data_records();
  seeds.push_back(seeds[3] + "\n\n" + seeds[3] + "\n");       // JSON Lines of one format
  seeds.push_back("[" + seeds[2] + ",\n " + seeds[2] + "]");  // a JSON array
  return seeds;
}

// ---- the training config and chat templates ----

void run_train_config_yaml(std::string_view bytes) {
  parse_train_config(std::string(bytes), {}, "fuzz.yaml");
}

std::vector<std::string> train_config_yaml_seeds() {
  return {train_config_yaml(), "lr: 1e-5\nmax_steps: 3\n",
          "data:\n  - a.jsonl\n  - b.txt\nmicro_batch: auto\n"};
}

void run_chat_template(std::string_view bytes) {
  jinja::Template::parse(bytes, "fuzz.jinja");
}

std::vector<std::string> chat_template_seeds() {
  return {chat_template_source(),
          "{% for m in messages %}{% if m.role == 'user' %}{{ '[INST] ' + m.content | trim + ' [/INST]' }}"
          "{% elif loop.last and not add_generation_prompt %}{{ m['content'] ~ eos_token }}{% endif %}{% "
          "endfor %}",
          "{% set ns = namespace(x=0) %}{% macro f(a, b=2) %}{{ a * b // 3 ** 2 }}{% endmacro %}"
          "{{ f(1) if x is defined else [1, 2][0:1] | join(', ') }}{# c #}{%- generation -%}y{% "
          "endgeneration %}"};
}

}  // namespace

const std::vector<FuzzTarget>& fuzz_targets() {
  static const std::vector<FuzzTarget> targets = {
      {"safetensors_file", run_safetensors_file, safetensors_file_seeds, json_tokens, false},
      {"safetensors_header", run_safetensors_header, safetensors_header_seeds, json_tokens, true},
      {"config_json", run_config_json, config_json_seeds, json_tokens, true},
      {"tokenizer_json", run_tokenizer_json, tokenizer_json_seeds, json_tokens, true},
      {"tokenizer_config_json", run_tokenizer_config_json, tokenizer_config_json_seeds, json_tokens, true},
      {"jsonl_records", run_jsonl_records, jsonl_records_seeds, json_tokens, true},
      {"train_config_yaml", run_train_config_yaml, train_config_yaml_seeds, yaml_tokens, false},
      {"chat_template", run_chat_template, chat_template_seeds, jinja_tokens, false},
  };
  return targets;
}

const FuzzTarget& fuzz_target(std::string_view name) {
  for (const FuzzTarget& t : fuzz_targets())
    if (name == t.name) return t;
  fail("fuzz", "no fuzz target named '{}'", name);
}

}  // namespace ferry::faults
