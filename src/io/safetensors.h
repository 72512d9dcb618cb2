// Reading safetensors files and Hugging Face model directories of them.
//
// Format: u64 little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
// then the data section; offsets are relative to the data section.
//
// A file is validated completely when it is opened (DESIGN.md §6.5): afterwards every TensorInfo
// names a byte range that lies inside the file and matches its dtype and shape, so readers never
// check bounds again. Every error names the file and, where there is one, the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace ferry {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t offset = 0;  // absolute position of the first byte in the file
  size_t bytes = 0;   // numel() * dtype_size(dtype)
  // The product of the dims; 1 for a scalar (shape []).
  int64_t numel() const;
};

// "[4096, 128]"
std::string shape_to_string(const std::vector<int64_t>& shape);

// What the header of a safetensors file of `size` bytes says: its tensors, validated against the
// file's size and sorted by offset, and its metadata. SafetensorsFile::open parses its mapping
// with this; `path` only names the file in errors.
struct SafetensorsLayout {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
SafetensorsLayout parse_safetensors_layout(const uint8_t* bytes, size_t size,
                                           const std::filesystem::path& path);

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // In the order of their data in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // The tensor's bytes inside the mapping. Aligned to the dtype size when the writer aligned the
  // data section (ferry and the safetensors library do); readers that need alignment must check.
  const void* data(const TensorInfo& info) const { return map_.data() + info.offset; }
  // The "__metadata__" map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return map_.path(); }
  // Total size of the file in bytes.
  size_t file_size() const { return map_.size(); }
  // Hint that a tensor will be read soon.
  void will_read(const TensorInfo& info) const { map_.will_read(info.offset, info.bytes); }

 private:
  SafetensorsFile() = default;

  MappedFile map_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A model's weights: DIR/model.safetensors, or the shards listed in DIR/model.safetensors.index.json.
// A directory with both is read from model.safetensors, as transformers reads it. The index is
// validated at open: it names files that exist, and every tensor it lists is in the
// shard it names.
class SafetensorsModel {
 public:
  // `path` is a model directory, or a single .safetensors file.
  static SafetensorsModel open(const std::filesystem::path& path);

  SafetensorsModel(SafetensorsModel&&) noexcept = default;
  SafetensorsModel& operator=(SafetensorsModel&&) noexcept = default;
  SafetensorsModel(const SafetensorsModel&) = delete;
  SafetensorsModel& operator=(const SafetensorsModel&) = delete;

  bool has(std::string_view name) const;
  // Error naming the tensor when the model has no such tensor.
  const TensorInfo& info(std::string_view name) const;
  // Every tensor name, in storage order (shard by shard, by offset).
  std::vector<std::string> names() const;
  // The raw on-disk bytes of a tensor (see SafetensorsFile::data about alignment).
  const void* data(std::string_view name) const;
  // The file that holds a tensor.
  const SafetensorsFile& file_of(std::string_view name) const;

  // Checks that a tensor can be read by read_f32 into `expected_shape` (present, that shape, a
  // floating dtype) without reading it; errors as read_f32's.
  void check_weight(std::string_view name, const std::vector<int64_t>& expected_shape) const;
  // Reads a floating tensor converted to fp32 into dst (numel floats). The shape must equal
  // `expected_shape`; otherwise the error names the tensor and both shapes. A NaN or infinity
  // (also one that an F64 value becomes in fp32) is an error naming the tensor and its first such element.
  void read_f32(std::string_view name, const std::vector<int64_t>& expected_shape, float* dst) const;

  // The on-disk dtype of the model's floating weights: the floating dtype holding the most elements.
  DType weights_dtype() const;

  // The directory (or file) the model was opened from.
  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  SafetensorsModel() = default;
  struct Location {
    size_t file;
    size_t tensor;  // position in files_[file].tensors()
  };
  const Location& locate(std::string_view name) const;
  // Opens the shards that the index file names and records where each listed tensor is.
  void open_shards(const std::filesystem::path& index_path);

  std::filesystem::path path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Location, std::less<>> tensors_;
};

}  // namespace ferry
