#include "io/scratch_file.h"

#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "disk tier";
constexpr std::string_view kPrefix = "ferry-state-";
constexpr std::string_view kSuffix = ".bin";

// The pid in a scratch file's name; 0 when the name is not one of ours.
pid_t owner_pid(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix))
    return 0;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return 0;
  return static_cast<pid_t>(std::stol(digits));
}

bool process_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

std::vector<std::filesystem::path> remove_stale_scratch_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const pid_t pid = owner_pid(entry.path().filename().string());
    if (pid == 0 || pid == ::getpid() || process_alive(pid)) continue;
    std::error_code remove_error;
    if (std::filesystem::remove(entry.path(), remove_error)) {
      log_info("disk tier: removed {}, left by a run (pid {}) that ended without cleaning up",
               entry.path().string(), pid);
      removed.push_back(entry.path());
    }
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
  path_ = dir / (std::string(kPrefix) + std::to_string(::getpid()) + std::string(kSuffix));
}

ScratchFile::~ScratchFile() {
  ::unlink(path_.c_str());
}

}  // namespace ferry
