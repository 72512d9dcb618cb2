// A read-only memory map of a whole file, unmapped when the object dies.
//
// Weights are read through the page cache instead of copied into our own buffers: a model's
// shards can be larger than the RAM left after the optimizer state, and the kernel can drop
// clean pages that were already converted to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace ferry {

class MappedFile {
 public:
  // Maps the file read-only. An empty file maps to data() == nullptr, size() == 0.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Tells the kernel a byte range will be read soon, sequentially (a hint; never fails).
  void will_read(size_t offset, size_t bytes) const;

 private:
  void release();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace ferry
