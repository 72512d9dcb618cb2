// SafetensorsFile: mapping and validating one .safetensors file.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/json_text.h"

namespace ferry {

static_assert(std::endian::native == std::endian::little, "safetensors lengths are little-endian");

namespace {

using nlohmann::json;

// The safetensors library refuses larger headers too; a bigger number means a corrupt file.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr const char* kCorrupt = "the file is truncated or corrupt; re-download or re-save it";

template <typename... Args>
[[noreturn]] void fail_file(const std::filesystem::path& path, fmt::format_string<Args...> format,
                            Args&&... args) {
  fail("safetensors", "{}: {}", path.string(), fmt::format(format, std::forward<Args>(args)...));
}

// JSON numbers that are integers in [0, 2^64); nlohmann stores larger ones as floating point,
// which this rejects.
bool as_u64(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// Parses the header, rejecting a name that appears twice (plain JSON parsing would keep the last
// one silently, hiding a corrupt or hand-edited header).
json parse_header(const std::filesystem::path& path, std::string_view text) {
  std::string duplicate;
  std::set<std::string> seen;
  json::parser_callback_t watch = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = std::move(key);
    }
    return true;
  };
  const std::string too_deep = json_nesting_problem(text);
  if (!too_deep.empty()) fail_file(path, "the header holds {}; {}", too_deep, kCorrupt);
  json header;
  try {
    header = json::parse(text.begin(), text.end(), watch);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number such as 1e400
    fail_file(path, "the header is not valid UTF-8 JSON ({}); {}", e.what(), kCorrupt);
  }
  if (!header.is_object())
    fail_file(path, "the header must be a JSON object, got {}; {}", json_excerpt(header), kCorrupt);
  if (!duplicate.empty()) fail_file(path, "the header lists '{}' twice; {}", duplicate, kCorrupt);
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::filesystem::path& path, const json& value) {
  std::map<std::string, std::string> out;
  if (value.is_null()) return out;
  if (!value.is_object())
    fail_file(path, "__metadata__ must be an object of strings, got {}; {}", json_excerpt(value), kCorrupt);
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail_file(path, "__metadata__ entry '{}' must be a string, got {}; {}", key, json_excerpt(v), kCorrupt);
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

// Validates one header entry against a data section of `data_size` bytes that starts at
// `data_start` in the file.
TensorInfo parse_entry(const std::filesystem::path& path, const std::string& name, const json& entry,
                       size_t data_start, size_t data_size) {
  TensorInfo info;
  info.name = name;
  if (!entry.is_object())
    fail_file(path, "tensor '{}': entry must be an object with dtype, shape and data_offsets, got {}; {}",
              name, json_excerpt(entry), kCorrupt);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) fail_file(path, "tensor '{}' has no '{}'; {}", name, key, kCorrupt);

  const json& dtype = entry["dtype"];
  if (!dtype.is_string())
    fail_file(path, "tensor '{}': dtype must be a string, got {}; {}", name, json_excerpt(dtype), kCorrupt);
  const std::string dtype_text = dtype.get<std::string>();
  if (!parse_dtype(dtype_text, &info.dtype))
    fail_file(path,
              "tensor '{}' has dtype '{}', which ferry does not know; supported: F32, F16, BF16, F64, I64, "
              "I32, I16, "
              "I8, U8, BOOL (convert the checkpoint to one of them)",
              name, dtype_text);

  const json& shape = entry["shape"];
  if (!shape.is_array())
    fail_file(path, "tensor '{}': shape must be an array, got {}; {}", name, json_excerpt(shape), kCorrupt);
  // numel and bytes are computed in u64 with overflow checks: a corrupt shape must not wrap
  // around to a small number that happens to match the byte range.
  uint64_t numel = 1;
  for (const json& d : shape) {
    uint64_t dim;
    if (!as_u64(d, &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_file(path, "tensor '{}': shape {} holds {}, which is not a non-negative integer; {}", name,
                json_excerpt(shape), json_excerpt(d), kCorrupt);
    info.shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(numel, dim, &numel))
      fail_file(path, "tensor '{}': shape {} has more elements than 2^64; {}", name, json_excerpt(shape),
                kCorrupt);
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info.dtype)), &bytes))
    fail_file(path, "tensor '{}': shape {} of {} is larger than 2^64 bytes; {}", name, json_excerpt(shape),
              dtype_text, kCorrupt);

  const json& offsets = entry["data_offsets"];
  uint64_t begin, end;
  if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], &begin) || !as_u64(offsets[1], &end))
    fail_file(path, "tensor '{}': data_offsets must be [begin, end], two integers in [0, 2^64), got {}; {}",
              name, json_excerpt(offsets), kCorrupt);
  if (begin > end)
    fail_file(path, "tensor '{}': data_offsets [{}, {}] end before they begin; {}", name, begin, end,
              kCorrupt);
  if (end > data_size)
    fail_file(path, "tensor '{}' claims bytes {}..{} but the data section holds {} bytes; {}", name, begin,
              end, data_size, kCorrupt);
  if (end - begin != bytes)
    fail_file(path, "tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] span {} bytes; {}",
              name, shape_to_string(info.shape), dtype_text, bytes, begin, end, end - begin, kCorrupt);
  info.offset = data_start + static_cast<size_t>(begin);
  info.bytes = static_cast<size_t>(bytes);
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

SafetensorsLayout parse_safetensors_layout(const uint8_t* bytes, size_t size,
                                           const std::filesystem::path& path) {
  if (size < 8)
    fail_file(path, "the file holds {} bytes, fewer than the 8-byte header length; {}", size, kCorrupt);
  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes)
    fail_file(path, "the header length field says {} bytes, more than the 100 MiB limit; {}", header_len,
              kCorrupt);
  if (header_len > size - 8)
    fail_file(path, "the header length field says {} bytes but only {} bytes follow it; {}", header_len,
              size - 8, kCorrupt);

  // Writers may pad the header with spaces (the format allows it) so that the data is aligned.
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(header_len));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) text.remove_suffix(1);
  const json header = parse_header(path, text);

  SafetensorsLayout layout;
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      layout.metadata = parse_metadata(path, entry);
      continue;
    }
    layout.tensors.push_back(parse_entry(path, name, entry, data_start, data_size));
  }

  std::sort(layout.tensors.begin(), layout.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  // Two tensors sharing bytes would alias each other in memory and on the next save.
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : layout.tensors) {
    if (t.bytes == 0) continue;
    if (previous && previous->offset + previous->bytes > t.offset)
      fail_file(path, "tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap; {}", previous->name,
                previous->offset - data_start, previous->offset - data_start + previous->bytes, t.name,
                t.offset - data_start, t.offset - data_start + t.bytes, kCorrupt);
    previous = &t;
  }
  return layout;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.map_ = MappedFile::open(path);
  SafetensorsLayout layout = parse_safetensors_layout(file.map_.data(), file.map_.size(), path);
  file.tensors_ = std::move(layout.tensors);
  file.metadata_ = std::move(layout.metadata);
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ferry
