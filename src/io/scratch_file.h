// The name and the lifetime of a run's scratch file in a directory (the disk tier's state file):
// DIR/ferry-state-PID.bin, removed when the owner goes (at exit, and when an error unwinds the
// run). A run killed before that (SIGKILL, a crash, a power cut) leaves its file behind; the next
// run in the same directory removes every such file whose process is gone, so scratch space does
// not leak across runs. The file holds nothing a resume needs (checkpoints hold the state).
#pragma once

#include <cstddef>
#include <filesystem>
#include <vector>

namespace ferry {

class ScratchFile {
 public:
  // Creates `dir` if needed and removes stale scratch files in it (logged); does not create the
  // file itself (its opener does, io/uring_file.h).
  explicit ScratchFile(const std::filesystem::path& dir);
  ~ScratchFile();  // removes the file, if it exists
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Removes DIR/ferry-state-PID.bin files whose process no longer runs; returns the removed paths.
std::vector<std::filesystem::path> remove_stale_scratch_files(const std::filesystem::path& dir);

// Bytes free for an unprivileged writer on the filesystem of `dir` (statvfs f_bavail).
size_t free_disk_bytes(const std::filesystem::path& dir);

}  // namespace ferry
