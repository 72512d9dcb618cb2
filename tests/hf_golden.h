// Reading the Hugging Face golden fixtures (tools/make_hf_goldens.py): the tensors of
// golden.safetensors, the settings of golden.json, and the batch as ferry's trainer sees it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/ignore_index.h"
#include "engine/step_batch.h"
#include "io/safetensors.h"

namespace ferry::test {

struct Golden {
  SafetensorsFile file;
  nlohmann::json meta;
  int64_t batch = 0, seq = 0;

  explicit Golden(const std::filesystem::path& dir)
      : file(SafetensorsFile::open(dir / "golden.safetensors")) {
    std::ifstream in(dir / "golden.json");
    in >> meta;
    const TensorInfo* ids = file.find("input_ids");
    batch = ids->shape[0];
    seq = ids->shape[1];
  }
  std::vector<float> f32(const std::string& name) const {
    const TensorInfo* t = file.find(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<float> out(static_cast<size_t>(t->numel()));
    EXPECT_EQ(t->dtype, DType::F32) << name;
    std::memcpy(out.data(), file.data(*t), t->bytes);
    return out;
  }
  std::vector<int32_t> i64(const std::string& name) const {
    const TensorInfo* t = file.find(name);
    std::vector<int32_t> out(static_cast<size_t>(t->numel()));
    const auto* src = static_cast<const int64_t*>(file.data(*t));
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(src[i]);
    return out;
  }
};

// Hugging Face labels are unshifted (the model shifts them); ferry's targets are shifted and
// never cross a document boundary (a position that restarts at 0 starts a new document).
inline StepBatch golden_batch(const Golden& g, int64_t micro_batch) {
  const auto ids = g.i64("input_ids"), labels = g.i64("labels"), positions = g.i64("position_ids");
  StepBatch b;
  b.rows = g.batch;
  b.seq_len = g.seq;
  b.micro_batch = micro_batch;
  for (int64_t r = 0; r < g.batch; ++r) {
    for (int64_t t = 0; t < g.seq; ++t) {
      const size_t i = static_cast<size_t>(r * g.seq + t);
      const bool next_in_doc = t + 1 < g.seq && positions[i + 1] != 0;
      b.ids.push_back(ids[i]);
      b.targets.push_back(next_in_doc ? labels[i + 1] : kIgnoreIndex);
      b.positions.push_back(positions[i]);
      b.doc_start.push_back(static_cast<int32_t>((r % micro_batch) * g.seq + t - positions[i]));
    }
  }
  return b;
}

}  // namespace ferry::test
