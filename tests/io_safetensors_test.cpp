#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

using test::throws_with;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A hand-made file: the length field, the header text as given, then `data_bytes` bytes of data.
fs::path make_file(const ScratchDir& dir, const std::string& header, size_t data_bytes,
                   const std::string& name = "model.safetensors") {
  const fs::path path = dir / name;
  write_bytes(path, u64_le(header.size()) + header + std::string(data_bytes, '\x11'));
  return path;
}

TEST(Safetensors, RoundTripKeepsBytesDtypesAndShapes) {
  ScratchDir dir("st-roundtrip");
  const auto f32 = test::random_vector(31 * 33, 1);
  const auto bf16 = encode_f32(test::random_vector(7, 2).data(), 7, DType::BF16);
  const auto f16 = encode_f32(test::random_vector(15, 3).data(), 15, DType::F16);
  const std::vector<int64_t> i64 = {-5, 0, 1ll << 40, 7};
  const float scalar = 3.25f;
  const std::vector<TensorToWrite> tensors = {
      {"bf16.odd", DType::BF16, {7}, bf16.data()},  // odd byte count before wider types: tests the data order
      {"model.f32", DType::F32, {31, 33}, f32.data()},
      {"half", DType::F16, {3, 5}, f16.data()},
      {"ids", DType::I64, {4}, i64.data()},
      {"scalar", DType::F32, {}, &scalar},
      {"empty", DType::F32, {0, 4}, nullptr},
  };
  const fs::path path = dir / "x.safetensors";
  write_safetensors(path, tensors);
  EXPECT_FALSE(fs::exists(dir / "x.safetensors.tmp"));

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  size_t total = 0;
  for (const TensorToWrite& t : tensors) {
    const TensorInfo* info = file.find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    EXPECT_EQ(info->numel(), numel);
    ASSERT_EQ(info->bytes, static_cast<size_t>(numel) * dtype_size(t.dtype)) << t.name;
    // Every tensor starts aligned to its element size.
    EXPECT_EQ(info->offset % dtype_size(t.dtype), 0u) << t.name;
    if (info->bytes) {
      EXPECT_EQ(std::memcmp(file.data(*info), t.data, info->bytes), 0) << t.name;
    }
    total += info->bytes;
  }
  EXPECT_EQ(file.find("absent"), nullptr);

  // The layout the safetensors library insists on: header padded to 8, data without gaps.
  const std::string bytes = read_bytes(path);
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + total);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["bf16.odd"]["dtype"], "BF16");
}

TEST(Safetensors, ReadF32ConvertsEachFloatingType) {
  ScratchDir dir("st-read");
  const auto values = test::random_vector(33 * 5, 4);
  const auto bf16 = encode_f32(values.data(), values.size(), DType::BF16);
  const auto f16 = encode_f32(values.data(), values.size(), DType::F16);
  const auto f64 = encode_f32(values.data(), values.size(), DType::F64);
  write_safetensors_model(dir.path(), {{"a.bf16", DType::BF16, {33, 5}, bf16.data()},
                                       {"a.f16", DType::F16, {33, 5}, f16.data()},
                                       {"a.f32", DType::F32, {33, 5}, values.data()},
                                       {"a.f64", DType::F64, {165}, f64.data()}});
  ASSERT_TRUE(fs::exists(dir / "model.safetensors"));
  const SafetensorsModel model = SafetensorsModel::open(dir.path());
  std::vector<float> out(values.size());
  std::vector<float> expected(values.size());

  model.read_f32("a.f32", {33, 5}, out.data());
  EXPECT_EQ(out, values);
  model.read_f32("a.f64", {165}, out.data());
  EXPECT_EQ(out, values);
  model.read_f32("a.bf16", {33, 5}, out.data());
  for (size_t i = 0; i < values.size(); ++i) expected[i] = bf16_to_f32(f32_to_bf16(values[i]));
  EXPECT_EQ(out, expected);
  model.read_f32("a.f16", {33, 5}, out.data());
  for (size_t i = 0; i < values.size(); ++i) expected[i] = f16_to_f32(f32_to_f16(values[i]));
  EXPECT_EQ(out, expected);
}

// A tensor given as fp32 to convert while writing (how a model is saved without a second copy in
// memory) gives the same file as the same values converted up front; more than one 4Mi-element
// conversion piece, and an odd tail.
TEST(Safetensors, F32SourcesAreConvertedAsWrittenToTheSameBytes) {
  ScratchDir dir("st-f32-source");
  const size_t n = (size_t{4} << 20) + 4099;
  const auto values = test::random_vector(n, 7);
  const auto small = test::random_vector(33, 8);
  const auto bf16 = encode_f32(values.data(), n, DType::BF16);
  const auto f16 = encode_f32(small.data(), small.size(), DType::F16);
  write_safetensors(dir / "up_front.safetensors",
                    {{"big", DType::BF16, {static_cast<int64_t>(n)}, bf16.data()},
                     {"small", DType::F16, {3, 11}, f16.data()}});
  TensorToWrite big{"big", DType::BF16, {static_cast<int64_t>(n)}, nullptr},
      tiny{"small", DType::F16, {3, 11}, nullptr};
  big.f32_source = values.data();
  tiny.f32_source = small.data();
  write_safetensors(dir / "as_written.safetensors", {big, tiny});
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string a = bytes(dir / "up_front.safetensors"), b = bytes(dir / "as_written.safetensors");
  EXPECT_GT(a.size(), 2 * n);
  EXPECT_TRUE(a == b) << "the files differ";
}

TEST(Safetensors, WeightsDtypeIsTheMostCommonFloatingType) {
  ScratchDir dir("st-dtype");
  const auto big = encode_f32(test::random_vector(1000, 5).data(), 1000, DType::BF16);
  const auto norm = test::random_vector(10, 6);
  const std::vector<int64_t> ids(5000, 1);
  write_safetensors_model(dir.path(), {{"w", DType::BF16, {1000}, big.data()},
                                       {"norm", DType::F32, {10}, norm.data()},
                                       {"ids", DType::I64, {5000}, ids.data()}});
  EXPECT_EQ(SafetensorsModel::open(dir.path()).weights_dtype(), DType::BF16);
}

TEST(Safetensors, ShardsAndIndexReadBack) {
  ScratchDir dir("st-shards");
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 7; ++i) data.push_back(test::random_vector(100 + i, 10 + i));  // ~400 bytes each
  data.push_back(test::random_vector(1000, 99));                                     // 4000 bytes: alone
  for (size_t i = 0; i < data.size(); ++i)
    tensors.push_back({"layers." + std::to_string(i) + ".w",
                       DType::F32,
                       {static_cast<int64_t>(data[i].size())},
                       data[i].data()});
  // An earlier single-file save, to be replaced.
  write_safetensors_model(dir.path(), tensors);
  ASSERT_TRUE(fs::exists(dir / "model.safetensors"));

  write_safetensors_model(dir.path(), tensors, 1000);
  // Greedy: two ~400-byte tensors per shard (3 shards of 2, then 1), the big one alone: 5 shards.
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  for (int s = 1; s <= 5; ++s)
    EXPECT_TRUE(fs::exists(dir / fmt::format("model-{:05d}-of-00005.safetensors", s))) << s;
  const auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  size_t total = 0;
  for (const auto& d : data) total += d.size() * 4;
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["metadata"]["total_parameters"], total / 4);
  EXPECT_EQ(index["weight_map"]["layers.0.w"], "model-00001-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.2.w"], "model-00002-of-00005.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.7.w"], "model-00005-of-00005.safetensors");
  EXPECT_EQ(SafetensorsFile::open(dir / "model-00003-of-00005.safetensors").metadata().at("format"), "pt");

  const SafetensorsModel model = SafetensorsModel::open(dir.path());
  std::vector<std::string> expected_names;
  for (const auto& t : tensors) expected_names.push_back(t.name);
  EXPECT_EQ(model.names(), expected_names);
  for (size_t i = 0; i < data.size(); ++i) {
    std::vector<float> out(data[i].size());
    EXPECT_TRUE(model.has(tensors[i].name));
    model.read_f32(tensors[i].name, tensors[i].shape, out.data());
    EXPECT_EQ(out, data[i]) << tensors[i].name;
  }
  EXPECT_FALSE(model.has("nope"));

  // A save with another shard count removes the shards of this one; then back to a single file.
  write_safetensors_model(dir.path(), tensors, 2000);  // [0..3], [4..6], [7]
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00005.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00003.safetensors"));
  EXPECT_EQ(SafetensorsModel::open(dir.path()).names().size(), tensors.size());
  write_safetensors_model(dir.path(), tensors);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "model.safetensors");
  }
  EXPECT_EQ(files, 1u);
}

TEST(Safetensors, UnpaddedHeaderLeavesDataMisalignedButReadable) {
  ScratchDir dir("st-unaligned");
  // Header of odd length: the bf16 data starts at an odd address inside the mapping.
  std::string header = R"({"w":{"dtype":"BF16","shape":[5000],"data_offsets":[0,10000]}})";
  if (header.size() % 2 == 0) header += " ";
  const auto values = test::random_vector(5000, 7);
  const auto bf16 = encode_f32(values.data(), values.size(), DType::BF16);
  write_bytes(
      dir / "model.safetensors",
      u64_le(header.size()) + header + std::string(reinterpret_cast<const char*>(bf16.data()), bf16.size()));
  const SafetensorsModel model = SafetensorsModel::open(dir.path());
  std::vector<float> out(values.size());
  model.read_f32("w", {5000}, out.data());
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(out[i], bf16_to_f32(f32_to_bf16(values[i]))) << i;
}

// A file written by the Python safetensors library (0.8.0, from torch 2.11) with
// save_file({...}, metadata={"format": "pt", "note": "hi"}): its header order, padding and data
// order are the library's own.
TEST(Safetensors, ReadsAFileWrittenByThePythonLibrary) {
  ScratchDir dir("st-python");
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"hi"},"i64":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},)"
      R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[24,24]},"f32":{"dtype":"F32","shape":[2,3],)"
      R"("data_offsets":[24,48]},"scalar":{"dtype":"F32","shape":[],"data_offsets":[48,52]},"bf16":{"dtype":)"
      R"("BF16","shape":[3],"data_offsets":[52,58]},"f16":{"dtype":"F16","shape":[2],"data_offsets":[58,62]}}     )";
  const char* data_hex =
      "0100000000000000feffffffffffffff0000000000010000000000000000803f0000004000004040000080400000a0400000e0"
      "40c03f"
      "00c050400038ff7b";
  std::string data;
  for (const char* p = data_hex; *p; p += 2)
    data.push_back(static_cast<char>(std::stoi(std::string(p, 2), nullptr, 16)));
  ASSERT_EQ(header.size(), 400u);
  write_bytes(dir / "plain.safetensors", u64_le(header.size()) + header + data);

  const SafetensorsFile file = SafetensorsFile::open(dir / "plain.safetensors");
  EXPECT_EQ(file.file_size(), 470u);
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hi"}}));
  std::vector<std::string> names;
  for (const TensorInfo& t : file.tensors()) names.push_back(t.name);
  // By offset; the zero-byte tensor sorts by name among those at its offset.
  EXPECT_EQ(names, (std::vector<std::string>{"i64", "empty", "f32", "scalar", "bf16", "f16"}));
  int64_t ids[3];
  std::memcpy(ids, file.data(*file.find("i64")), sizeof ids);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], -2);
  EXPECT_EQ(ids[2], int64_t{1} << 40);
  EXPECT_EQ(file.find("empty")->bytes, 0u);
  EXPECT_EQ(file.find("scalar")->numel(), 1);

  const SafetensorsModel model = SafetensorsModel::open(dir / "plain.safetensors");
  std::vector<float> out(6);
  model.read_f32("f32", {2, 3}, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  model.read_f32("bf16", {3}, out.data());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 3), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  model.read_f32("f16", {2}, out.data());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 2), (std::vector<float>{0.5f, 65504.0f}));
  model.read_f32("scalar", {}, out.data());
  EXPECT_EQ(out[0], 7.0f);
  model.read_f32("empty", {0, 4}, out.data());
}

// ---- bad files: each error names the file, the tensor and the problem ----

TEST(SafetensorsErrors, FileShorterThanTheLengthField) {
  ScratchDir dir("st-bad");
  write_bytes(dir / "tiny.safetensors", "abc");
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "tiny.safetensors"); },
                          {"[safetensors]", "tiny.safetensors", "holds 3 bytes", "truncated or corrupt"}));
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "missing.safetensors"); },
                          {"missing.safetensors", "cannot open"}));
}

TEST(SafetensorsErrors, HeaderLengthBeyondTheFile) {
  ScratchDir dir("st-bad");
  write_bytes(dir / "a.safetensors", u64_le(1000) + "{}");
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "a.safetensors"); },
                          {"a.safetensors", "header length field says 1000 bytes but only 2 bytes follow"}));
  write_bytes(dir / "b.safetensors", u64_le(~uint64_t{0}) + "{}");
  EXPECT_TRUE(
      throws_with([&] { SafetensorsFile::open(dir / "b.safetensors"); }, {"b.safetensors", "100 MiB"}));
}

TEST(SafetensorsErrors, HeaderNotJson) {
  ScratchDir dir("st-bad");
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(make_file(dir, "{\"w\": nope}", 0)); },
                          {"model.safetensors", "not valid UTF-8 JSON"}));
  // Invalid UTF-8 inside a tensor name.
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(
            make_file(dir, "{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4));
      },
      {"not valid UTF-8 JSON"}));
  EXPECT_TRUE(
      throws_with([&] { SafetensorsFile::open(make_file(dir, "[1,2]   ", 0)); }, {"must be a JSON object"}));
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(make_file(dir,
                                        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                        8));
      },
      {"lists 'w' twice"}));
  EXPECT_TRUE(
      throws_with([&] { SafetensorsFile::open(make_file(dir, R"({"__metadata__":{"format":1}})", 0)); },
                  {"__metadata__ entry 'format' must be a string"}));
}

TEST(SafetensorsErrors, UnknownDtype) {
  ScratchDir dir("st-bad");
  const auto path =
      make_file(dir, R"({"model.embed":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4);
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(path); },
                          {"model.safetensors", "tensor 'model.embed'", "dtype 'F8_E4M3'"}));
}

TEST(SafetensorsErrors, ShapeTimesDtypeDiffersFromByteRange) {
  ScratchDir dir("st-bad");
  const auto path =
      make_file(dir, R"({"q.weight":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,20]}})", 20);
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(path); },
                          {"tensor 'q.weight'", "[3, 4] of BF16 needs 24 bytes", "span 20 bytes"}));
}

TEST(SafetensorsErrors, OffsetsPastTheEnd) {
  ScratchDir dir("st-bad");
  const auto path =
      make_file(dir, R"({"model.norm.weight":{"dtype":"F32","shape":[128],"data_offsets":[100,612]}})", 300);
  EXPECT_TRUE(
      throws_with([&] { SafetensorsFile::open(path); },
                  {"[safetensors]", "model.safetensors", "tensor 'model.norm.weight' claims bytes 100..612",
                   "data section holds 300 bytes", "truncated or corrupt"}));

  // A good file that lost its tail.
  const auto values = test::random_vector(64, 8);
  write_safetensors(dir / "cut.safetensors", {{"a", DType::F32, {64}, values.data()}});
  std::string bytes = read_bytes(dir / "cut.safetensors");
  write_bytes(dir / "cut.safetensors", bytes.substr(0, bytes.size() - 10));
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "cut.safetensors"); },
                          {"cut.safetensors", "tensor 'a' claims bytes 0..256", "holds 246 bytes"}));
}

TEST(SafetensorsErrors, OffsetsAndShapesThatOverflow) {
  ScratchDir dir("st-bad");
  // Does not fit a u64 at all.
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(make_file(
            dir, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}})", 4));
      },
      {"tensor 'w'", "data_offsets must be [begin, end]"}));
  // Fits a u64 but lies far past the end.
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(make_file(
            dir,
            R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}})",
            4));
      },
      {"tensor 'w' claims bytes 18446744073709551612..18446744073709551615"}));
  // numel * 4 wraps around to 0 in 64 bits: must not pass as a zero-byte tensor.
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(make_file(
            dir, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0));
      },
      {"tensor 'w'", "more elements than 2^64"}));
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(
            make_file(dir, R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0));
      },
      {"tensor 'w'", "larger than 2^64 bytes"}));
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(
            make_file(dir, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
      },
      {"tensor 'w'", "not a non-negative integer"}));
  EXPECT_TRUE(throws_with(
      [&] {
        SafetensorsFile::open(make_file(dir, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8));
      },
      {"tensor 'w'", "end before they begin"}));
}

TEST(SafetensorsErrors, OverlappingTensors) {
  ScratchDir dir("st-bad");
  const auto path = make_file(dir,
                              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12);
  EXPECT_TRUE(
      throws_with([&] { SafetensorsFile::open(path); }, {"'a' (bytes 0..8) and 'b' (bytes 4..12) overlap"}));
}

TEST(SafetensorsErrors, IndexListsATensorItsShardLacks) {
  ScratchDir dir("st-bad");
  const auto a = test::random_vector(100, 1), b = test::random_vector(100, 2);
  write_safetensors_model(dir.path(),
                          {{"a", DType::F32, {100}, a.data()}, {"b", DType::F32, {100}, b.data()}}, 500);
  auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  index["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors";
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  EXPECT_TRUE(throws_with([&] { SafetensorsModel::open(dir.path()); },
                          {"model.safetensors.index.json", "tensor 'lm_head.weight'",
                           "model-00002-of-00002.safetensors", "does not contain it"}));

  index["weight_map"].erase("lm_head.weight");
  index["weight_map"]["b"] = "model-00009-of-00009.safetensors";
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  EXPECT_TRUE(throws_with([&] { SafetensorsModel::open(dir.path()); },
                          {"shard 'model-00009-of-00009.safetensors'", "tensor 'b'", "no such file"}));

  index["weight_map"]["b"] = "../elsewhere.safetensors";
  write_bytes(dir / "model.safetensors.index.json", index.dump());
  EXPECT_TRUE(throws_with([&] { SafetensorsModel::open(dir.path()); }, {"tensor 'b'", "not a file name"}));

  write_bytes(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_TRUE(throws_with([&] { SafetensorsModel::open(dir.path()); }, {"index.json", "not valid JSON"}));
}

TEST(SafetensorsErrors, ShapeMismatchAndAbsentTensors) {
  ScratchDir dir("st-bad");
  const auto w = test::random_vector(12, 1);
  const std::vector<int64_t> ids = {1, 2};
  write_safetensors_model(dir.path(), {{"model.norm.weight", DType::F32, {3, 4}, w.data()},
                                       {"ids", DType::I64, {2}, ids.data()}});
  const SafetensorsModel model = SafetensorsModel::open(dir.path());
  std::vector<float> out(12);
  EXPECT_TRUE(throws_with(
      [&] {
        model.read_f32("model.norm.weight", {4, 3}, out.data());
      },
      {"model.safetensors", "tensor 'model.norm.weight' has shape [3, 4]", "expects [4, 3]"}));
  EXPECT_TRUE(throws_with([&] { model.info("lm_head.weight"); }, {"no tensor 'lm_head.weight'"}));
  EXPECT_TRUE(throws_with([&] { model.read_f32("ids", {2}, out.data()); }, {"tensor 'ids' is I64"}));
}

TEST(SafetensorsErrors, DirectoryWithoutSafetensors) {
  ScratchDir dir("st-bad");
  write_bytes(dir / "pytorch_model.bin", "x");
  EXPECT_TRUE(
      throws_with([&] { SafetensorsModel::open(dir.path()); },
                  {"has neither model.safetensors nor model.safetensors.index.json", "pytorch_model.bin"}));
  EXPECT_TRUE(throws_with([&] { SafetensorsModel::open(dir / "nowhere"); }, {"no such model directory"}));
}

TEST(SafetensorsWriter, RejectsDuplicateNames) {
  ScratchDir dir("st-writer");
  const float x = 1.0f;
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(dir / "d.safetensors", {{"a", DType::F32, {}, &x}, {"a", DType::F32, {}, &x}});
      },
      {"tensor 'a' is given twice"}));
  EXPECT_FALSE(fs::exists(dir / "d.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "d.safetensors.tmp"));
}

}  // namespace
}  // namespace ferry
