#include "train/output_dir_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "io/completion_marker.h"
#include "io/replace_directory.h"
#include "train/host_memory_watch.h"
#include "train/metrics_log.h"
#include "train/resolved_config.h"
#include "train/run_evaluation.h"
#include "train/run_report.h"

namespace ferry {

namespace {

namespace fs = std::filesystem;
constexpr const char* kWhere = "output_dir";

// An absolute path with symlinks and `..` resolved as far as it exists, so that two spellings of
// one directory compare equal.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) return p.lexically_normal();
  fs::path canonical = fs::weakly_canonical(abs, ec);
  return (ec ? abs : canonical).lexically_normal();
}

// Whether `inner` is `outer` or lies below it (both resolved).
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // the trailing "" of "dir/"
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

bool is_checkpoint_name(const std::string& name) {
  return name.rfind("checkpoint-", 0) == 0;
}

// checkpoint-N or best/, the directories a run saves by replacing them whole.
bool is_replaced_save_name(const std::string& name) {
  return is_checkpoint_name(name) || name == kBestModelDir;
}

// What an interrupted replacement of such a save left (NAME.tmp, NAME.old: io/replace_directory.h):
// the save's name, else "".
std::string interrupted_save_of(const std::string& name) {
  const std::string base = directory_replaced_by(name).string();
  return is_replaced_save_name(base) ? base : std::string();
}

// Entries that hold no result of a run: the lock, the tokenized-data cache (keyed by its inputs'
// fingerprint, so any run may reuse it), and what a run refused before its first step leaves and
// the next run rewrites: the host memory report, the log and the resolved config.
bool holds_no_result(const std::string& name) {
  return name == kOutputLockFile || name == ".cache" || name == kHostMemoryReport || name == kTrainLogFile ||
         name == kResolvedConfigFile;
}

std::vector<std::string> result_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!holds_no_result(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string some_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 4; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 4) s += fmt::format(" and {} more", names.size() - 4);
  return s;
}

// overwrite_output_dir: the earlier run's state goes before this run writes anything, so that its
// metrics and checkpoints cannot mix with this run's. Weights and config.json stay until this
// run's save replaces them; other files are the user's and stay.
void clear_earlier_run(const fs::path& dir) {
  unmark_complete(dir);
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() &&
        (is_replaced_save_name(name) || !interrupted_save_of(name).empty() || name == "runs")) {
      fs::remove_all(entry.path());
      ++checkpoints;
    }
  }
  std::error_code ec;
  const bool had_metrics = fs::remove(dir / kMetricsFile, ec);
  fs::remove(dir / kRunReport, ec);
  if (checkpoints > 0 || had_metrics)
    log_info("overwrite_output_dir: removed the earlier run's {}{} checkpoint(s) from {}",
             had_metrics ? "metrics.jsonl and " : "", checkpoints, dir.string());
}

// What a save that a kill (or a full disk) interrupted left beside a checkpoint or best/: the
// complete one of them kept under its name, the rest removed (io/replace_directory.h).
void recover_interrupted_saves(const fs::path& dir) {
  std::vector<fs::path> bases;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_directory()) continue;
    const std::string base = interrupted_save_of(entry.path().filename().string());
    if (!base.empty()) bases.push_back(dir / base);
  }
  std::sort(bases.begin(), bases.end());
  bases.erase(std::unique(bases.begin(), bases.end()), bases.end());
  for (const fs::path& base : bases) {
    const std::string done = recover_replaced_directory(base);
    if (!done.empty()) log_info("{}: {}", dir.string(), done);
  }
}

std::string read_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? std::string("unknown") : pid;
}

}  // namespace

OutputDirLock::OutputDirLock(const fs::path& dir) : path_(dir / kOutputLockFile) {
  // The holder removes the file as it releases the lock, so a lock won on a file that is no longer
  // the one at path_ is worthless: try again on the new file.
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    FERRY_CHECK(fd_ >= 0, kWhere, "cannot create the lock file {}: {}; check that the directory is writable",
                path_.string(), std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_holder(fd_);
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        fail(kWhere,
             "{} is in use by another ferry run (pid {}); two runs in one output_dir would corrupt each "
             "other's checkpoints: wait for that run to end, or choose another output_dir",
             dir.string(), holder);
      fail(kWhere, "cannot lock {}: {}; choose an output_dir on a local file system", path_.string(),
           std::strerror(err));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      break;
    ::close(fd_);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    log_warn("cannot write this run's pid into {}: {}", path_.string(), std::strerror(errno));
}

OutputDirLock::OutputDirLock(OutputDirLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

OutputDirLock::~OutputDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
}

OutputDirLock claim_output_dir(const TrainConfig& config) {
  const fs::path out = resolved(config.output_dir);
  const fs::path model = resolved(config.model);
  FERRY_CHECK(
      !is_within(out, model), kWhere,
      "output_dir {} is the input model directory ({}) or lies inside it; the run would write over its "
      "input: choose an output_dir outside the model directory",
      config.output_dir.string(), config.model.string());
  FERRY_CHECK(!is_within(model, out), kWhere,
              "the model directory {} lies inside output_dir {}, where checkpoint rotation or "
              "overwrite_output_dir could delete it: copy the model elsewhere or choose another output_dir",
              config.model.string(), config.output_dir.string());

  std::error_code ec;
  fs::create_directories(config.output_dir, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create output_dir {}: {}", config.output_dir.string(), ec.message());
  FERRY_CHECK(fs::is_directory(config.output_dir), kWhere, "output_dir {} exists and is not a directory",
              config.output_dir.string());
  OutputDirLock lock(config.output_dir);

  if (!config.resume) {
    const std::vector<std::string> found = result_entries(config.output_dir);
    if (!found.empty() && !config.overwrite_output_dir)
      fail(kWhere,
           "{} is not empty (it holds {}) and this is a fresh run; to continue the run it holds, add "
           "resume=true; to replace it, add overwrite_output_dir=true; or choose another output_dir",
           config.output_dir.string(), some_names(found));
    if (!found.empty()) clear_earlier_run(config.output_dir);
  } else {
    recover_interrupted_saves(config.output_dir);
  }
  return lock;
}

void warn_if_unfinished_output(const fs::path& dir) {
  std::error_code ec;
  if (is_marked_complete(dir) || !fs::is_directory(dir, ec)) return;
  bool ferry_output = fs::exists(dir / kMetricsFile, ec) || fs::exists(dir / kOutputLockFile, ec);
  for (const auto& entry : fs::directory_iterator(dir, ec))
    ferry_output |= entry.is_directory() && is_checkpoint_name(entry.path().filename().string());
  if (ferry_output)
    log_warn(
        "{} is the output directory of a ferry run that has not finished writing its model (it has no {} "
        "marker): its weights may be missing or from an earlier save; resume that run, or use one of its "
        "complete checkpoint-N directories",
        dir.string(), kCompleteMarker);
}

}  // namespace ferry
