// The name and the lifetime of a run's scratch file in a directory (the disk tier's state file):
// DIR/ferry-state-PID-TAG.bin, created by this run alone (O_EXCL, a random tag beside the pid:
// runs in two containers may share a pid and a disk_dir) and locked (flock) while it lives, removed
// when the owner goes (at exit, and when an error unwinds the run). A run killed before that
// (SIGKILL, a crash, a power cut) leaves its file behind, unlocked; the next run in the same
// directory removes every such file that no process holds, so scratch space does not leak across
// runs, and never one that a running process holds, on this host or another one sharing the
// directory. The file holds nothing a resume needs (checkpoints hold the state).
#pragma once

#include <cstddef>
#include <filesystem>
#include <vector>

namespace ferry {

class ScratchFile {
 public:
  // Creates `dir` if needed, removes stale scratch files in it (logged), and creates this run's
  // file, empty and locked; its opener (io/uring_file.h) sizes it.
  explicit ScratchFile(const std::filesystem::path& dir);
  ~ScratchFile();  // removes the file and releases its lock
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int lock_fd_ = -1;
};

// Removes the scratch files in DIR (ferry-state-*.bin) that no process holds locked; returns the
// removed paths. A held file stays; on a file system without locks, so does one whose name's pid
// runs on this host.
std::vector<std::filesystem::path> remove_stale_scratch_files(const std::filesystem::path& dir);

// Bytes free for an unprivileged writer on the filesystem of `dir` (statvfs f_bavail).
size_t free_disk_bytes(const std::filesystem::path& dir);

}  // namespace ferry
