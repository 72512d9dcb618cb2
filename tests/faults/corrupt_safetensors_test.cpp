// Truncated and corrupted safetensors files and model directories, through the real loaders: each
// is a ferry::Error naming the file and, where there is one, the tensor; never a crash, a
// bad_alloc, or weights that are silently wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/log.h"
#include "fault_inputs.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/model_weights.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ferry::faults {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;
using test::throws_with;

struct FileCase {
  const char* name;
  std::string bytes;
  std::vector<std::string> message;  // parts the error must hold, besides the file's path
};

// A header entry "t" of `dtype`, `shape` and `offsets` (JSON text), with 64 bytes of data.
std::string one_tensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return safetensors_bytes(
      R"({"t": {"dtype": )" + dtype + R"(, "shape": )" + shape + R"(, "data_offsets": )" + offsets + "}}",
      std::string(64, '\x11'));
}

std::vector<FileCase> file_cases() {
  const std::string valid = valid_safetensors();
  return {
      {"empty", "", {"fewer than the 8-byte header length"}},
      {"five bytes", "\x10\0\0\0\0", {"fewer than the 8-byte header length"}},
      {"header length huge", u64_le(uint64_t{1} << 60) + "{}", {"more than the 100 MiB limit"}},
      {"header length past the end", u64_le(4096) + "{}", {"says 4096 bytes but only 2 bytes follow"}},
      {"truncated in the header", valid.substr(0, 40), {"bytes but only 32 bytes follow"}},
      {"truncated in the data",
       valid.substr(0, valid.size() - 7),
       {"tensor 'b' claims bytes 24..40", "truncated"}},
      {"header not JSON", safetensors_bytes("{\"a\": ", ""), {"the header is not valid UTF-8 JSON"}},
      {"header invalid UTF-8", safetensors_bytes("{\"\xff\": {}}", ""), {"not valid UTF-8 JSON"}},
      {"header a list", safetensors_bytes("[1, 2]", ""), {"must be a JSON object, got [1, 2]"}},
      {"header nested 100,000 deep",
       safetensors_bytes(nested_arrays(100000), ""),
       {"nested deeper than 512"}},
      {"entry nested deep", safetensors_bytes("{\"t\": " + nested_arrays(600) + "}", ""), {"nested deeper"}},
      {"entry not an object", safetensors_bytes(R"({"t": 5})", ""), {"tensor 't': entry must be an object"}},
      {"entry without offsets",
       safetensors_bytes(R"({"t": {"dtype": "F32", "shape": []}})", ""),
       {"tensor 't' has no 'data_offsets'"}},
      {"dtype unknown",
       one_tensor("\"Q4_K\"", "[4]", "[0, 16]"),
       {"tensor 't' has dtype 'Q4_K'", "does not know"}},
      {"dtype not a string",
       one_tensor("4", "[4]", "[0, 16]"),
       {"tensor 't': dtype must be a string, got 4"}},
      {"shape not a list", one_tensor("\"F32\"", "\"4\"", "[0, 16]"), {"tensor 't': shape must be an array"}},
      {"shape negative",
       one_tensor("\"F32\"", "[-4]", "[0, 16]"),
       {"tensor 't'", "not a non-negative integer"}},
      {"shape fractional",
       one_tensor("\"F32\"", "[2.5]", "[0, 10]"),
       {"tensor 't'", "not a non-negative integer"}},
      {"shape product overflows",
       one_tensor("\"F32\"", "[4294967296, 4294967296]", "[0, 16]"),
       {"tensor 't'", "more elements than 2^64"}},
      {"bytes overflow",
       one_tensor("\"F64\"", "[4611686018427387904]", "[0, 16]"),
       {"tensor 't'", "larger than 2^64 bytes"}},
      {"offsets not a pair",
       one_tensor("\"F32\"", "[4]", "[16]"),
       {"tensor 't': data_offsets must be [begin, end]"}},
      {"offsets negative", one_tensor("\"F32\"", "[4]", "[-16, 0]"), {"tensor 't': data_offsets must be"}},
      {"offsets huge",
       one_tensor("\"F32\"", "[4]", "[0, 1e400]"),
       {"not valid UTF-8 JSON", "number overflow"}},
      {"offsets reversed", one_tensor("\"F32\"", "[4]", "[16, 0]"), {"tensor 't'", "end before they begin"}},
      {"offsets past the end",
       one_tensor("\"F32\"", "[4]", "[48, 64000]"),
       {"tensor 't' claims bytes 48..64000 but the data section holds 64 bytes"}},
      {"offsets not dtype times shape",
       one_tensor("\"F32\"", "[2, 3]", "[0, 20]"),
       {"tensor 't': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] span 20 bytes"}},
      {"overlapping tensors",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},)"
                         R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})",
                         std::string(32, '\0')),
       {"tensors 'a' (bytes 0..24) and 'b' (bytes 16..32) overlap"}},
      {"a name twice",
       safetensors_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                         R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                         std::string(8, '\0')),
       {"the header lists 'a' twice"}},
      {"metadata not strings",
       safetensors_bytes(R"({"__metadata__": {"format": 1}})", ""),
       {"__metadata__ entry 'format' must be a string, got 1"}},
  };
}

TEST(CorruptSafetensors, EachCorruptionIsAnErrorNamingTheFileAndTensor) {
  ScratchDir dir("faults-safetensors");
  for (const FileCase& c : file_cases()) {
    SCOPED_TRACE(c.name);
    const fs::path path = dir / "model.safetensors";
    write_bytes(path, c.bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("[safetensors] " + path.string() + ": "), std::string::npos) << message;
      for (const std::string& part : c.message) EXPECT_NE(message.find(part), std::string::npos) << message;
      EXPECT_LT(message.size(), 600u) << message;
    }
  }
}

TEST(CorruptSafetensors, TheValidSeedLoads) {
  ScratchDir dir("faults-safetensors-valid");
  write_bytes(dir / "x.safetensors", valid_safetensors());
  const SafetensorsFile file = SafetensorsFile::open(dir / "x.safetensors");
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

struct IndexCase {
  const char* name;
  std::string index;
  std::vector<std::string> message;
};

TEST(CorruptSafetensors, ABadIndexIsAnErrorNamingIt) {
  const std::vector<IndexCase> cases = {
      {"truncated", R"({"weight_map": {"a": "model-00001.safe)", {"not valid JSON"}},
      {"nested 100,000 deep", nested_arrays(100000), {"nested deeper than 512"}},
      {"no weight map", R"({"metadata": {}})", {"has no \"weight_map\" object"}},
      {"a shard that is a path",
       R"({"weight_map": {"a": "../../etc/passwd"}})",
       {"tensor 'a' maps to \"../../etc/passwd\", which is not a file name"}},
      {"a shard that is a list", R"({"weight_map": {"a": [1, 2]}})", {"tensor 'a' maps to [1, 2]"}},
      {"a missing shard",
       R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})",
       {"names shard 'model-00002-of-00002.safetensors'", "no such file"}},
      {"a tensor its shard lacks",
       R"({"weight_map": {"zz": "model-00001-of-00002.safetensors"}})",
       {"tensor 'zz' is listed in shard 'model-00001-of-00002.safetensors' but that file does not contain "
        "it"}},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.name);
    ScratchDir dir("faults-index");
    write_bytes(dir / "model-00001-of-00002.safetensors", valid_safetensors());
    write_bytes(dir / "model.safetensors.index.json", c.index);
    std::vector<std::string> parts = {(dir / "model.safetensors.index.json").string()};
    parts.insert(parts.end(), c.message.begin(), c.message.end());
    try {
      SafetensorsModel::open(dir.path());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

// ---- model directories: the weights against config.json ----

class CorruptModel : public ::testing::Test {
 protected:
  void SetUp() override { write_tiny_model(model_); }
  ModelWeights load() const { return load_model_weights(model_); }
  // Saves `w` over the model's weights, in fp32, sharded past `shard_bytes`.
  void save(const ModelWeights& w, const fs::path& dir, size_t shard_bytes = size_t{1} << 40) const {
    std::vector<const float*> units;
    for (const auto& u : w.units) units.push_back(u.data());
    save_model_weights(dir, w.layout, units, DType::F32, shard_bytes);
  }

  ScratchDir scratch_{"faults-model"};
  fs::path model_ = scratch_ / "model";
};

// A NaN in a row no token of the data may ever touch would be trained around and written out: it
// is refused at load, naming the tensor and the element.
TEST_F(CorruptModel, NonFiniteWeightsAreRefusedByTensorAndElement) {
  ModelWeights w = load();
  const int64_t hidden = w.config.hidden_size;
  float* embedding = w.param(w.layout.embedding_unit(), "embed_tokens.weight");
  embedding[9 * hidden + 5] = std::numeric_limits<float>::quiet_NaN();
  save(w, model_);
  EXPECT_TRUE(
      throws_with([&] { load(); }, {(model_ / "model.safetensors").string(),
                                    "tensor 'model.embed_tokens.weight' holds nan at element [9, 5]"}));

  embedding[9 * hidden + 5] = 0.0f;
  float* norm = w.param(w.layout.head_unit(), "model.norm.weight");
  norm[3] = -std::numeric_limits<float>::infinity();
  save(w, model_);
  EXPECT_TRUE(throws_with([&] { load(); }, {"tensor 'model.norm.weight' holds -inf at element [3]"}));
}

// transformers loads model.safetensors when a directory also has an index (modeling_utils checks
// SAFE_WEIGHTS_NAME first); ferry must train the same weights, and say that it ignored the index.
TEST_F(CorruptModel, ASingleFileWinsOverAnIndexAsInTransformers) {
  const ModelWeights single = load();
  ModelWeights other = single;
  for (auto& unit : other.units)
    for (float& v : unit) v += 1.0f;
  const fs::path sharded = scratch_ / "sharded";
  save(other, sharded, 4096);
  ASSERT_TRUE(fs::exists(sharded / "model.safetensors.index.json"));
  for (const auto& entry : fs::directory_iterator(sharded))
    fs::copy_file(entry.path(), model_ / entry.path().filename());

  set_log_level(LogLevel::Warn);
  testing::internal::CaptureStderr();
  const ModelWeights loaded = load();
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_EQ(loaded.units.size(), single.units.size());
  for (size_t i = 0; i < loaded.units.size(); ++i)
    EXPECT_EQ(loaded.units[i], single.units[i]) << "unit " << i;
  EXPECT_NE(log.find("loading model.safetensors and ignoring the index"), std::string::npos) << log;

  fs::remove(model_ / "model.safetensors");
  const ModelWeights from_index = load();
  const size_t unit = from_index.layout.embedding_unit();
  EXPECT_EQ(from_index.param(unit, "embed_tokens.weight")[0], other.param(unit, "embed_tokens.weight")[0]);
}

// Sizes in config.json that disagree with the weights are reported by tensor before the fp32 copy
// of the model is allocated: here that copy would need half a terabyte.
TEST_F(CorruptModel, ShapesAreCheckedBeforeAnythingIsAllocated) {
  nlohmann::json config = nlohmann::json::parse(test::read_file(model_ / "config.json"));
  config["vocab_size"] = 16000000;
  config["hidden_size"] = 8192;
  write_bytes(model_ / "config.json", config.dump());
  EXPECT_TRUE(
      throws_with([&] { load(); }, {"tensor 'model.embed_tokens.weight' has shape", "[16000000, 8192]"}));
}

}  // namespace
}  // namespace ferry::faults
