// Writing a file so that readers see either the old content or the complete new one.
//
// The bytes go to PATH.tmp; commit() fsyncs it, renames it onto PATH and fsyncs the directory.
// A crash (or an exception) before commit() leaves PATH untouched. Saves of weights and
// checkpoints go through here (DESIGN.md §4).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string_view>

namespace ferry {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  // Removes the temporary file when commit() did not run.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Sets aside disk space for a file of `total_bytes` before writing it, so that a full disk is
  // reported before a long write starts, with the size needed; the size also appears in later
  // write errors. Where the file system cannot reserve space, the writes report it.
  void reserve(size_t total_bytes);
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Bytes written so far.
  size_t size() const { return written_; }
  // Makes the file durable and visible under its final name.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
  size_t expected_ = 0;  // from reserve(); 0: unknown
};

// The whole content at once.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// fsyncs a directory so that a rename or unlink inside it survives a crash.
void sync_directory(const std::filesystem::path& dir);

// Swaps two existing paths in one step (renameat2 with RENAME_EXCHANGE), so that no moment sees
// neither: a directory replaced this way is always there, old or new. Returns false where the
// file system cannot exchange (the caller replaces in two renames instead); throws on other errors.
bool exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace ferry
