#include "fault_inputs.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data_test_tokenizer.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry::faults {

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  // A new file rather than a truncated one: ext4 writes a truncated-and-rewritten file back to
  // disk when it is closed (auto_da_alloc), which would make each fuzzer input cost a disk write.
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(uint64_t value) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &value, 8);
  return s;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

std::string valid_safetensors() {
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}})";
  std::string data(40, '\0');
  for (size_t i = 0; i < 10; ++i) {
    const float v = 0.5f * static_cast<float>(i) - 1.0f;
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  return safetensors_bytes(header, data);
}

std::string tiny_tokenizer_json() {
  return test::tiny_tokenizer_json();
}

std::string tiny_tokenizer_config_json() {
  return nlohmann::json{{"bos_token", "<|begin_of_text|>"},
                        {"eos_token", "<|im_end|>"},
                        {"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"add_bos_token", false}}
      .dump(2);
}

std::string chat_template_source() {
  return test::read_file(test::fixtures_dir() / "chat_templates" / "qwen2.5-instruct.jinja");
}

std::string train_config_yaml() {
  return R"(# a fine-tune of the tiny model
model: ./model
data: [train.jsonl, more.json]
output_dir: ./out
data_format: auto
seq_len: 64
global_batch: 4
micro_batch: 2
max_steps: 10
learning_rate: 1e-4
lr_scheduler_type: cosine
warmup_ratio: 0.1
weight_decay: 0.01
max_grad_norm: 1.0
gpu_memory: 24GiB
host_memory: 64GiB
max_shard_size: 5GB
threads: 2
trace_steps: [3, 5]
)";
}

std::vector<std::string> data_records() {
  return {
      R"({"text": "the cat is on the mat"})",
      R"({"instruction": "Add", "input": "2 and 2", "output": "4"})",
      R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]})",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, )"
      R"({"role": "assistant", "content": "Yo"}]})",
      R"({"prompt": "The sky is", "completion": " blue."})",
      R"({"input_ids": [1, 2, 3, 4], "labels": [-100, 2, 3, 4]})",
  };
}

DataSetup::DataSetup()
    : encoder(Tokenizer::from_json(tiny_tokenizer_json(), tiny_tokenizer_config_json())),
      chat_template(chat_template_source(), "qwen2.5-instruct.jinja", {{"eos_token", "<|im_end|>"}}) {}

TextDataOptions DataSetup::options() const {
  TextDataOptions o;
  o.encoder = &encoder;
  o.chat_template = &chat_template;
  o.chat.stop_strings = {"<|im_end|>"};
  o.vocab_size = 320;
  return o;
}

const DataSetup& data_setup() {
  static const DataSetup setup;
  return setup;
}

}  // namespace ferry::faults
