// SafetensorsModel: a Hugging Face model directory, single-file or sharded with an index.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"

namespace ferry {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F64;
}

// "found: consolidated.safetensors, pytorch_model.bin" to help a user who points at the wrong kind of
// checkpoint.
std::string describe_weight_files(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".safetensors" || ext == ".bin" || ext == ".pth" || ext == ".pt" || ext == ".gguf")
      found.push_back(entry.path().filename().string());
  }
  if (found.empty()) return "it holds no weight files";
  std::sort(found.begin(), found.end());
  std::string s = "it holds ";
  for (size_t i = 0; i < found.size() && i < 5; ++i) s += (i ? ", " : "") + found[i];
  if (found.size() > 5) s += fmt::format(" and {} more", found.size() - 5);
  return s;
}

// A shard name from the index must be a plain file name inside the model directory, never a path
// that reaches elsewhere.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

// Index of the first NaN or infinity in values[0, count), or count. The first pass has no branch
// (an exponent of all ones marks both), so it vectorizes; only a piece with one is searched again.
size_t first_non_finite(const float* values, size_t count) {
  uint32_t any = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    any |= (bits & 0x7F800000u) == 0x7F800000u;
  }
  if (!any) return count;
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return i;
  return count;
}

// "[9, 82]": the coordinates of a flat (row-major) index in `shape`.
std::string element_position(const std::vector<int64_t>& shape, size_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<size_t>(shape[d]);
    index[d] = static_cast<int64_t>(flat % extent);
    flat /= extent;
  }
  return shape_to_string(index);
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const fs::path& path) {
  SafetensorsModel model;
  model.path_ = path;

  if (fs::is_regular_file(path)) {
    model.files_.push_back(SafetensorsFile::open(path));
  } else if (!fs::is_directory(path)) {
    fail("safetensors",
         "{}: no such model directory; pass the directory that holds config.json and the weights",
         path.string());
  } else if (fs::is_regular_file(path / kSingleFile)) {
    // transformers' rule (modeling_utils looks for SAFE_WEIGHTS_NAME before SAFE_WEIGHTS_INDEX_NAME):
    // the single file wins, so ferry trains the weights transformers would load. The other may be
    // left over from an earlier save, hence the warning.
    if (fs::exists(path / kIndexFile))
      log_warn(
          "{}: holds both {} and {}; loading {} and ignoring the index, as transformers does (delete the "
          "file "
          "that is stale)",
          path.string(), kSingleFile, kIndexFile, kSingleFile);
    model.files_.push_back(SafetensorsFile::open(path / kSingleFile));
  } else if (fs::is_regular_file(path / kIndexFile)) {
    model.open_shards(path / kIndexFile);
  } else {
    fail("safetensors",
         "{}: has neither {} nor {} ({}); ferry reads Hugging Face safetensors checkpoints — convert others "
         "with "
         "transformers' save_pretrained(..., safe_serialization=True)",
         path.string(), kSingleFile, kIndexFile, describe_weight_files(path));
  }

  if (model.tensors_.empty()) {
    // A single file: every tensor in it belongs to the model.
    const SafetensorsFile& file = model.files_.front();
    for (size_t i = 0; i < file.tensors().size(); ++i)
      model.tensors_.emplace(file.tensors()[i].name, Location{0, i});
  }
  return model;
}

void SafetensorsModel::open_shards(const fs::path& index_path) {
  const json index = parse_json(read_text_file(index_path, "safetensors"), "safetensors", index_path.string(),
                                "re-download the model's index file");
  if (!json_has(index, "weight_map", &nlohmann::json::is_object))
    fail("safetensors", "{}: has no \"weight_map\" object; re-download the model's index file",
         index_path.string());
  const json& weight_map = index["weight_map"];
  if (weight_map.empty())
    fail("safetensors", "{}: \"weight_map\" lists no tensors; re-download the model's index file",
         index_path.string());

  // Shards are opened in name order, so that names() lists them as they are numbered.
  std::map<std::string, std::vector<std::string>> tensors_of_file;
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string() || !is_plain_file_name(file.get<std::string>()))
      fail("safetensors", "{}: tensor '{}' maps to {}, which is not a file name in the model directory",
           index_path.string(), name, json_excerpt(file));
    tensors_of_file[file.get<std::string>()].push_back(name);
  }
  const fs::path dir = index_path.parent_path();
  for (const auto& [file, names] : tensors_of_file) {
    const fs::path shard_path = dir / file;
    if (!fs::is_regular_file(shard_path))
      fail("safetensors",
           "{}: weight_map names shard '{}' (for tensor '{}' and {} more) but {} has no such file; the "
           "download "
           "is incomplete — fetch the missing shard",
           index_path.string(), file, names.front(), names.size() - 1, dir.string());
    const size_t file_index = files_.size();
    files_.push_back(SafetensorsFile::open(shard_path));
    const SafetensorsFile& shard = files_.back();
    for (const std::string& name : names) {
      const TensorInfo* info = shard.find(name);
      if (!info)
        fail("safetensors",
             "{}: tensor '{}' is listed in shard '{}' but that file does not contain it; the index and the "
             "shards "
             "come from different saves — re-download the model",
             index_path.string(), name, file);
      tensors_.emplace(name, Location{file_index, static_cast<size_t>(info - shard.tensors().data())});
    }
    if (shard.tensors().size() > names.size())
      log_warn("{}: {} tensors are not listed in {}; they are ignored, as transformers ignores them",
               shard_path.string(), shard.tensors().size() - names.size(), kIndexFile);
  }
}

const SafetensorsModel::Location& SafetensorsModel::locate(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail("safetensors",
         "{}: the model has no tensor '{}'; the checkpoint does not match its config.json (wrong "
         "architecture or a partial save?)",
         path_.string(), name);
  return it->second;
}

bool SafetensorsModel::has(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

const TensorInfo& SafetensorsModel::info(std::string_view name) const {
  const Location& loc = locate(name);
  return files_[loc.file].tensors()[loc.tensor];
}

const SafetensorsFile& SafetensorsModel::file_of(std::string_view name) const {
  return files_[locate(name).file];
}

const void* SafetensorsModel::data(std::string_view name) const {
  const Location& loc = locate(name);
  return files_[loc.file].data(files_[loc.file].tensors()[loc.tensor]);
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::pair<Location, const std::string*>> order;
  order.reserve(tensors_.size());
  for (const auto& [name, loc] : tensors_) order.emplace_back(loc, &name);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first.file != b.first.file ? a.first.file < b.first.file : a.first.tensor < b.first.tensor;
  });
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const auto& [loc, name] : order) out.push_back(*name);
  return out;
}

void SafetensorsModel::check_weight(std::string_view name, const std::vector<int64_t>& expected_shape) const {
  const SafetensorsFile& file = file_of(name);
  const TensorInfo& info = this->info(name);
  if (info.shape != expected_shape)
    fail("safetensors",
         "{}: tensor '{}' has shape {} but the model config expects {}; the weights do not match "
         "config.json",
         file.path().string(), info.name, shape_to_string(info.shape), shape_to_string(expected_shape));
  if (!is_floating(info.dtype))
    fail("safetensors",
         "{}: tensor '{}' is {}, not a floating type (F32, BF16, F16, F64); it cannot be a weight",
         file.path().string(), info.name, dtype_name(info.dtype));
}

void SafetensorsModel::read_f32(std::string_view name, const std::vector<int64_t>& expected_shape,
                                float* dst) const {
  check_weight(name, expected_shape);
  const Location& loc = locate(name);
  const SafetensorsFile& file = files_[loc.file];
  const TensorInfo& info = file.tensors()[loc.tensor];

  const size_t count = static_cast<size_t>(info.numel());
  const size_t element = dtype_size(info.dtype);
  const auto* src = static_cast<const uint8_t*>(file.data(info));
  // A writer that did not pad its header leaves the data misaligned; such tensors go through an
  // aligned bounce buffer instead of being read through a misaligned pointer.
  const bool aligned = reinterpret_cast<uintptr_t>(src) % element == 0;
  file.will_read(info);
  // Converting in parallel also spreads the page faults of the mapping over the threads.
  // (Uses the global pool: do not call this from inside one of its tasks.)
  std::atomic<size_t> first_bad{count};
  ThreadPool::global().parallel_for(
      count,
      [&](size_t begin, size_t end) {
        if (aligned) {
          convert_to_f32(src + begin * element, info.dtype, dst + begin, end - begin);
        } else {
          constexpr size_t kChunk = 4096;
          alignas(8) uint8_t bounce[kChunk * 8];
          for (size_t i = begin; i < end; i += kChunk) {
            const size_t n = std::min(kChunk, end - i);
            std::memcpy(bounce, src + i * element, n * element);
            convert_to_f32(bounce, info.dtype, dst + i, n);
          }
        }
        // Checked here, while the piece is still in cache: a NaN in a row the data never touches
        // would otherwise be trained around and written to the output unnoticed.
        const size_t bad = begin + first_non_finite(dst + begin, end - begin);
        if (bad == end) return;
        size_t seen = first_bad.load();
        while (bad < seen && !first_bad.compare_exchange_weak(seen, bad)) {
        }
      },
      size_t{1} << 18);
  if (first_bad.load() < count) {
    const size_t at = first_bad.load();
    fail("safetensors",
         "{}: tensor '{}' holds {} at element {} (flat index {}); ferry refuses weights that are not finite, "
         "as "
         "they would spread through training and into the saved model — repair the checkpoint or re-download "
         "it",
         file.path().string(), info.name, dst[at], element_position(info.shape, at), at);
  }
}

DType SafetensorsModel::weights_dtype() const {
  std::map<DType, uint64_t> elements;
  for (const auto& [name, loc] : tensors_) {
    const TensorInfo& info = files_[loc.file].tensors()[loc.tensor];
    if (is_floating(info.dtype)) elements[info.dtype] += static_cast<uint64_t>(info.numel());
  }
  if (elements.empty())
    fail("safetensors",
         "{}: the model has no floating-point tensors (F32, BF16, F16, F64); these are not weights ferry "
         "can train",
         path_.string());
  auto best = std::max_element(elements.begin(), elements.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return best->first;
}

}  // namespace ferry
