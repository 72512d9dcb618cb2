// Writing a file so that readers see either the old content or the complete new one.
//
// The bytes go to PATH.tmp; commit() fsyncs it, renames it onto PATH and fsyncs the directory.
// A crash (or an exception) before commit() leaves PATH untouched. Two writers of one PATH at once
// (processes sharing a cache) each publish a whole file: the second writes beside the first's
// locked PATH.tmp under a name of its own (PATH.tmp.PID.N). Saves of weights and
// checkpoints go through here (DESIGN.md §4). A file reserved at kDirectWriteMinBytes or more is
// written through O_DIRECT where the file system allows it (io/direct_file_writer.h): the same
// bytes, without the page cache.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string_view>

namespace ferry {

class DirectFileWriter;

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  // Removes the temporary file when commit() did not run.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Sets aside disk space for a file of `total_bytes` before writing it, so that a full disk is
  // reported before a long write starts, with the size needed; the size also appears in later
  // write errors. Where the file system cannot reserve space, the writes report it. Called before
  // the first write, for a large file it also chooses O_DIRECT (see above); the file must then
  // not grow past `total_bytes`.
  void reserve(size_t total_bytes);
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // `bytes` made by `fill(dst, at, count)` (bytes [at, at + count) into dst) as they are written,
  // in pieces whose sizes are multiples of `granule`, straight into the O_DIRECT staging where
  // there is one (possibly on several threads at once, for disjoint pieces): a tensor converted
  // from fp32 as it is saved, without a buffer of its own.
  void write_filled(size_t bytes, size_t granule,
                    const std::function<void(std::byte* dst, size_t at, size_t count)>& fill);
  // Whether the writes go through O_DIRECT (reserve).
  bool direct() const { return direct_ != nullptr; }
  // Whether files reserved from now on may use O_DIRECT (default: true, false where the
  // environment says FERRY_DIRECT_SAVES=0): the comparisons of bench/io_save_bench.cpp and the
  // tests of both paths.
  static void allow_direct_writes(bool allow);
  // Bytes written so far.
  size_t size() const { return written_; }
  // Makes the file durable and visible under its final name.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  // Runs a call of the O_DIRECT writer; a failure it reports gets the file's sizes added.
  void through_direct(const std::function<void()>& work);

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  int lock_fd_ = -1;  // holds PATH.tmp's flock until it is renamed (or removed)
  size_t written_ = 0;
  size_t expected_ = 0;  // from reserve(); 0: unknown
  std::unique_ptr<DirectFileWriter> direct_;
};

// The whole content at once.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// fsyncs a directory so that a rename or unlink inside it survives a crash; throws ferry::Error when
// the disk reports an error (a file system that cannot sync directories is let be).
void sync_directory(const std::filesystem::path& dir);

// The directory whose entries a rename or unlink of `path` changes: its parent, "." for a bare name.
std::filesystem::path containing_directory(const std::filesystem::path& path);

// Swaps two existing paths in one step (renameat2 with RENAME_EXCHANGE), so that no moment sees
// neither: a directory replaced this way is always there, old or new. Returns false where the
// file system cannot exchange (the caller replaces in two renames instead); throws on other errors.
bool exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace ferry
