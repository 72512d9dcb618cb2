// Replacing a directory of many files (a checkpoint, the best model) by a complete new one, so that
// a kill at any moment leaves a complete directory under its name, old or new, and whatever it
// left beside it is put right by the next run.
//
// The new directory is written under staged_directory(DIR) (DIR.tmp) and marked complete
// (io/completion_marker.h); replace_directory() then puts it in place of DIR in one step where the
// file system can exchange two paths, else in two renames through DIR.old. A run that starts after
// a kill calls recover_replaced_directory(), which keeps the complete directory that a kill left
// under one of the three names and removes the rest.
#pragma once

#include <filesystem>
#include <string>

namespace ferry {

// DIR.tmp: where the directory that replaces DIR is written.
std::filesystem::path staged_directory(const std::filesystem::path& dir);
// DIR where `path` is what a replacement of DIR writes or sets aside (DIR.tmp, DIR.old), else an
// empty path.
std::filesystem::path directory_replaced_by(const std::filesystem::path& path);

// Puts the complete staged_directory(dir) in place of dir, and syncs their parent. Where dir
// existed, its old content is returned, under a name no reader takes for dir (DIR.tmp after an
// exchange, DIR.old after two renames), for the caller to remove; else an empty path.
std::filesystem::path replace_directory(const std::filesystem::path& dir);

// Puts right what a kill during a replace_directory(dir) (or during the writing of the staged
// directory) left: where dir is not complete, the complete one of DIR.tmp (newer) or DIR.old
// takes its place; every other of the three is removed. Returns what it did, for the log ("" when
// there was nothing to do).
std::string recover_replaced_directory(const std::filesystem::path& dir);

// The staged directory of one replacement: created empty (what an earlier attempt left is
// removed), then either put in place of DIR by replace(), which removes the old DIR, or removed
// when the object goes first (a failed save leaves no half-written files taking disk space).
class StagedDirectory {
 public:
  explicit StagedDirectory(std::filesystem::path dir);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staged_; }
  // replace_directory(dir), then the old DIR removed.
  void replace();

 private:
  std::filesystem::path dir_, staged_;
  bool replaced_ = false;
};

// Removes a directory written with a completion marker, the marker first: a kill partway through
// must not leave a directory marked complete that has lost some of its files.
void remove_marked_directory(const std::filesystem::path& dir);

}  // namespace ferry
