// The parsers ferry runs on users' bytes, each as one function of those bytes, for the seeded
// fuzzer (parser_fuzz_test) and the libFuzzer targets (fuzz/). A target returns, or throws
// ferry::Error; any other exception, a crash or a hang is a bug.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::faults {

struct FuzzTarget {
  const char* name;
  void (*run)(std::string_view bytes);
  std::vector<std::string> (*seeds)();
  std::vector<std::string> (*tokens)();
  bool json;  // the seeds are JSON (structural mutations apply)
};

// safetensors_header, config_json, tokenizer_json, tokenizer_config_json, jsonl_records,
// train_config_yaml, chat_template.
const std::vector<FuzzTarget>& fuzz_targets();
const FuzzTarget& fuzz_target(std::string_view name);

}  // namespace ferry::faults
