#include "io/safetensors_writer.h"

#include <algorithm>
#include <bit>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ferry {

static_assert(std::endian::native == std::endian::little, "safetensors lengths are little-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Bytes of one tensor, checking what the caller handed in.
size_t tensor_bytes(const fs::path& path, const TensorToWrite& t) {
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    FERRY_CHECK(d >= 0, "safetensors", "{}: tensor '{}' has a negative dimension in its shape", path.string(),
                t.name);
    FERRY_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel), "safetensors",
                "{}: tensor '{}' has too many elements", path.string(), t.name);
  }
  uint64_t bytes;
  FERRY_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &bytes),
              "safetensors", "{}: tensor '{}' is larger than 2^64 bytes", path.string(), t.name);
  FERRY_ASSERT(bytes == 0 || (t.data != nullptr) + (t.f32_source != nullptr) + static_cast<bool>(t.fetch) +
                                     static_cast<bool>(t.f32_pieces) ==
                                 1,
               "a tensor to write has one source");
  return static_cast<size_t>(bytes);
}

void check_names(const fs::path& where, const std::vector<TensorToWrite>& tensors) {
  std::set<std::string_view> seen;
  for (const TensorToWrite& t : tensors) {
    FERRY_CHECK(!t.name.empty() && t.name != "__metadata__", "safetensors", "{}: '{}' cannot name a tensor",
                where.string(), t.name);
    FERRY_CHECK(seen.insert(t.name).second, "safetensors", "{}: tensor '{}' is given twice", where.string(),
                t.name);
  }
}

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// The weight files an earlier save may have left: model.safetensors, the index, and shards.
bool is_weight_file_name(const std::string& name) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return name == kSingleFile || name == kIndexFile || std::regex_match(name, shard);
}

void remove_stale(const fs::path& dir, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_weight_file_name(name) && !keep.count(name))
      stale.push_back(entry.path());
  }
  // The index goes first: without it a reader falls back to model.safetensors, never to a mix of
  // old shards.
  std::sort(stale.begin(), stale.end(), [](const fs::path& a, const fs::path& b) {
    return (a.filename() == kIndexFile) > (b.filename() == kIndexFile);
  });
  for (const fs::path& p : stale) {
    std::error_code ec;
    fs::remove(p, ec);
    FERRY_CHECK(!ec, "safetensors", "{}: cannot remove this file of an earlier save: {}", p.string(),
                ec.message());
  }
  sync_directory(dir);
}

}  // namespace

void write_safetensors(const fs::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_names(path, tensors);
  std::vector<size_t> bytes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) bytes[i] = tensor_bytes(path, tensors[i]);

  // Data order: larger elements first (stable), so each tensor starts at a multiple of its
  // element size without any padding between tensors.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].dtype) > dtype_size(tensors[b].dtype);
  });
  std::vector<size_t> begin(tensors.size());
  size_t offset = 0;
  for (size_t i : order) {
    begin[i] = offset;
    offset += bytes[i];
  }

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {begin[i], begin[i] + bytes[i]}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    fail("safetensors", "{}: a tensor name or metadata string is not valid UTF-8 ({})", path.string(),
         e.what());
  }
  // Spaces up to a multiple of 8, so that the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(path);
  const uint64_t header_len = text.size();
  out.reserve(8 + text.size() + offset);
  out.write(&header_len, 8);
  out.write(text);
  for (size_t i : order) {
    const TensorToWrite& t = tensors[i];
    if (t.f32_source == nullptr && !t.f32_pieces) {
      out.write(t.fetch && bytes[i] > 0 ? t.fetch() : t.data, bytes[i]);
      continue;
    }
    // Converted as written, into the file's staging (AtomicFile::write_filled).
    const size_t element = dtype_size(t.dtype), count = bytes[i] / element;
    for (size_t at = 0; at < count; at += kF32Piece) {
      const size_t n = std::min(kF32Piece, count - at);
      const float* f32 = t.f32_pieces ? t.f32_pieces(at, n) : t.f32_source + at;
      out.write_filled(n * element, element, [&](std::byte* dst, size_t from, size_t piece) {
        convert_from_f32(f32 + from / element, t.dtype, dst, piece / element);
      });
    }
  }
  out.commit();
}

void write_safetensors_model(const fs::path& dir, const std::vector<TensorToWrite>& tensors,
                             size_t max_shard_bytes) {
  FERRY_CHECK(max_shard_bytes > 0, "safetensors", "{}: the maximum shard size must be positive",
              dir.string());
  check_names(dir, tensors);
  std::error_code ec;
  fs::create_directories(dir, ec);
  FERRY_CHECK(!ec, "safetensors", "{}: cannot create the output directory: {}", dir.string(), ec.message());

  size_t total = 0, parameters = 0;
  for (const TensorToWrite& t : tensors) {
    total += tensor_bytes(dir, t);
    parameters += tensor_bytes(dir, t) / dtype_size(t.dtype);
  }

  if (total <= max_shard_bytes) {
    write_safetensors(dir / kSingleFile, tensors);
    remove_stale(dir, {kSingleFile});
    return;
  }

  // Greedy fill in the given order, as huggingface_hub's split_torch_state_dict_into_shards does.
  std::vector<std::vector<const TensorToWrite*>> shards;
  size_t current = 0;
  for (const TensorToWrite& t : tensors) {
    const size_t b = tensor_bytes(dir, t);
    if (shards.empty() || (current > 0 && current + b > max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += b;
  }

  nlohmann::json weight_map = nlohmann::json::object();
  std::set<std::string> written;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    std::vector<TensorToWrite> part;
    part.reserve(shards[s].size());
    for (const TensorToWrite* t : shards[s]) {
      part.push_back(*t);
      weight_map[t->name] = name;
    }
    write_safetensors(dir / name, part);
    written.insert(name);
  }
  // transformers writes json.dumps(index, indent=2, sort_keys=True) + "\n" (5.x adds
  // total_parameters); nlohmann's object keeps keys sorted.
  nlohmann::json index = {{"metadata", {{"total_parameters", parameters}, {"total_size", total}}},
                          {"weight_map", weight_map}};
  write_file_atomic(dir / kIndexFile, index.dump(2) + "\n");
  written.insert(kIndexFile);
  remove_stale(dir, written);
}

std::vector<uint8_t> encode_f32(const float* src, size_t count, DType to) {
  std::vector<uint8_t> out(count * dtype_size(to));
  convert_from_f32(src, to, out.data(), count);
  return out;
}

}  // namespace ferry
