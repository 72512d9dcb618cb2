// Valid inputs of every kind ferry reads from users, small enough to break in many ways quickly:
// the seeds of the corrupt-input tables and of the parser fuzzer. Only the parsing layers are
// needed (no engine), so that the libFuzzer build compiles just those (fuzz/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "data/text_dataset.h"
#include "data/text_encoder.h"
#include "tokenizer/chat_template.h"

namespace ferry::faults {

// "[[[...]]]": arrays nested `depth` deep.
std::string nested_arrays(size_t depth);
// Writes `bytes` to `path` as they are.
void write_bytes(const std::filesystem::path& path, std::string_view bytes);
// The 8-byte little-endian length field of a safetensors file.
std::string u64_le(uint64_t value);
// A safetensors file: the length of `header`, `header` as given, then `data`.
std::string safetensors_bytes(const std::string& header, const std::string& data);
// A valid file of two F32 tensors, "a" [2, 3] and "b" [4], with metadata.
std::string valid_safetensors();

// tokenizer.json / tokenizer_config.json of the data tests' tiny byte-level BPE tokenizer.
std::string tiny_tokenizer_json();
std::string tiny_tokenizer_config_json();
// Qwen2.5-Instruct's chat template (tests/fixtures/chat_templates).
std::string chat_template_source();
// A training config as users write one, and records of each data format.
std::string train_config_yaml();
std::vector<std::string> data_records();

// What loading a data file needs: the tiny tokenizer and the chat template, built once.
struct DataSetup {
  DataSetup();
  TextDataOptions options() const;

  TokenizerTextEncoder encoder;
  ChatTemplate chat_template;
};
const DataSetup& data_setup();

}  // namespace ferry::faults
