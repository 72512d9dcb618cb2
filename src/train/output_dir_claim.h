// Claiming a run's output directory before any long work starts, so that a run never writes over
// its input, another run, or an earlier run's results it was not asked to replace.
//
// * output_dir may not be the model directory or lie inside it (the run would write over its
//   input), nor contain it (a checkpoint rotation or overwrite_output_dir could delete it).
// * A fresh run (resume: false) needs a new or empty output_dir, unless overwrite_output_dir:
//   true, which first removes the earlier run's metrics.jsonl, checkpoints and completion marker:
//   a new run never mixes its metrics with another's, and never resumes from another's checkpoint.
// * The directory is locked for the whole run (flock on OUTPUT/.ferry.lock, which holds the
//   holder's pid): a second run into it fails at once, naming the holder, instead of the two
//   corrupting each other's checkpoints.
#pragma once

#include <filesystem>

#include "train/train_config.h"

namespace ferry {

inline constexpr const char* kOutputLockFile = ".ferry.lock";

// An exclusive lock on a directory, held while the object lives.
class OutputDirLock {
 public:
  // Locks DIR (which must exist); throws ferry::Error naming the holder's pid when another
  // process holds the lock.
  explicit OutputDirLock(const std::filesystem::path& dir);
  // Removes the lock file, then releases the lock.
  ~OutputDirLock();
  OutputDirLock(OutputDirLock&& other) noexcept;
  OutputDirLock& operator=(OutputDirLock&&) = delete;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The checks and the lock above, for config.output_dir (created when missing). Call first: it
// reads only paths, never the model or the data.
OutputDirLock claim_output_dir(const TrainConfig& config);

// Warns when DIR is the output directory of a ferry run that has not finished writing its model
// (no completion marker): its weights may be missing, partial or an earlier save's.
void warn_if_unfinished_output(const std::filesystem::path& dir);

}  // namespace ferry
