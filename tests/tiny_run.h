// A tiny training run for the tests of what runs do to files: a random qwen3 `tiny` model with a
// tokenizer file, random pre-tokenized data, and TrainConfigs over them; plus the files' bytes
// to compare directories before and after.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model_weights.h"
#include "test_util.h"
#include "train/model_init.h"
#include "train/train_config.h"

namespace ferry::test {

// Whether the model directory `trained` holds other weights than `initial`: that a run trained at
// all, which its losses need not show in a few steps (each is on another batch of random tokens).
inline bool weights_moved(const std::filesystem::path& trained, const std::filesystem::path& initial) {
  return load_model_weights(trained).units != load_model_weights(initial).units;
}

// Whether `text` holds `part`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of the ferry::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The "step" of each line of a metrics.jsonl, in file order (-1 for a line that is not a record).
inline std::vector<int64_t> metric_steps(const std::filesystem::path& file) {
  std::vector<int64_t> steps;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    steps.push_back(record.is_object() ? record.value("step", int64_t{-1}) : -1);
  }
  return steps;
}

// Every regular file under DIR (relative path -> bytes).
inline std::map<std::string, std::string> tree_bytes(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[std::filesystem::relative(e.path(), dir).string()] = read_file(e.path());
  return files;
}

// Paths under DIR whose name ends in `.tmp` (what an interrupted atomic write leaves).
inline std::vector<std::string> temporaries(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) found.push_back(e.path().string());
  }
  return found;
}

// The overrides every tiny run shares: 6 steps of 4 sequences of 48 tokens of `data` with the
// model in `model`, into `out`, saved in float32.
inline std::vector<std::string> tiny_run_overrides(const std::filesystem::path& model,
                                                   const std::filesystem::path& data,
                                                   const std::filesystem::path& out) {
  return {"model=" + model.string(),
          "data=" + data.string(),
          "output_dir=" + out.string(),
          "seq_len=48",
          "global_batch=4",
          "micro_batch=2",
          "max_steps=6",
          "learning_rate=1e-3",
          "warmup_steps=2",
          "save_dtype=float32"};
}

class TinyRun : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = scratch_ / "model";
    write_random_model(preset_config("qwen3", "tiny"), 7, model_dir_);
    std::ofstream(model_dir_ / "tokenizer.json")
        << "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n";
    data_ = scratch_ / "train.jsonl";
    write_token_data(data_, 120, 320, 11);
  }
  // 6 steps of 4 sequences of 48 tokens into scratch/OUT, saved in float32, on the CPU.
  TrainConfig config(const std::string& out, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> overrides = tiny_run_overrides(model_dir_, data_, scratch_ / out);
    overrides.insert(overrides.end(), {"device=cpu", "threads=1"});
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }

  ScratchDir scratch_{"run"};
  std::filesystem::path model_dir_, data_;
};

}  // namespace ferry::test
