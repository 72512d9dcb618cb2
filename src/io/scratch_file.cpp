#include "io/scratch_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "disk tier";
constexpr std::string_view kPrefix = "ferry-state-";
constexpr std::string_view kSuffix = ".bin";

// Whether a name is a scratch file's: ferry-state-PID-TAG.bin (or ferry-state-PID.bin, as runs
// before the tag named theirs).
bool scratch_name(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return false;
  const std::string middle = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return !middle.empty() && middle.find_first_not_of("0123456789abcdef-") == std::string::npos &&
         middle.find_first_of("0123456789") == 0;
}

// The pid in a scratch file's name (what a file system without locks falls back on).
pid_t owner_pid(const std::string& name) {
  const size_t end = name.find_first_not_of("0123456789", kPrefix.size());
  const std::string digits = name.substr(kPrefix.size(), end - kPrefix.size());
  return digits.empty() || digits.size() > 9 ? 0 : static_cast<pid_t>(std::stol(digits));
}

bool process_alive(pid_t pid) {
  return pid == 0 || ::kill(pid, 0) == 0 || errno == EPERM;
}

// Eight random hex digits: with the pid, a name no other run (in any pid namespace) takes.
std::string random_tag() {
  std::random_device device;
  return fmt::format("{:08x}", static_cast<uint32_t>(device()));
}

}  // namespace

std::vector<std::filesystem::path> remove_stale_scratch_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!scratch_name(entry.path().filename().string()) || !entry.is_regular_file(ec)) continue;
    const int fd = ::open(entry.path().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    // Locked by nobody: its run is gone (removed while this lock is held; a run creates its own
    // file, never takes an existing one). Where the file system has no locks, the pid in the name
    // says, for the runs of this host and pid namespace.
    bool stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!stale && errno != EWOULDBLOCK) stale = !process_alive(owner_pid(entry.path().filename().string()));
    if (stale && ::unlink(entry.path().c_str()) == 0) {
      log_info("disk tier: removed {}, left by a run that ended without cleaning up", entry.path().string());
      removed.push_back(entry.path());
    }
    ::close(fd);
  }
  return removed;
}

size_t free_disk_bytes(const std::filesystem::path& dir) {
  struct statvfs s {};
  FERRY_CHECK(::statvfs(dir.c_str(), &s) == 0, kWhere, "cannot read the free space of {}: {}", dir.string(),
              std::strerror(errno));
  return static_cast<size_t>(s.f_bavail) * static_cast<size_t>(s.f_frsize);
}

ScratchFile::ScratchFile(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create disk_dir {}: {}; give a directory you can write", dir.string(),
              ec.message());
  remove_stale_scratch_files(dir);
  for (int attempt = 0; lock_fd_ < 0; ++attempt) {
    path_ = dir / fmt::format("{}{}-{}{}", kPrefix, ::getpid(), random_tag(), kSuffix);
    lock_fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FERRY_CHECK(lock_fd_ >= 0 || (errno == EEXIST && attempt < 16), kWhere,
                "cannot create a file in disk_dir {}: {}; give a directory you can write", dir.string(),
                std::strerror(errno));
  }
  // Where the file system has no locks, the file is not marked as held: another run's sweep
  // cannot lock it either, and leaves it.
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    log_debug("disk tier: cannot lock {}: {}", path_.string(), std::strerror(errno));
}

ScratchFile::~ScratchFile() {
  ::unlink(path_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace ferry
