#include "io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace ferry {

namespace {
// Linux moves at most about 2 GiB per write(); larger tensors are written in pieces.
constexpr size_t kMaxWrite = size_t{1} << 30;

std::filesystem::path parent_or_dot(const std::filesystem::path& path) {
  auto parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}
}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  temp_path_ = path_;
  temp_path_ += ".tmp";
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("io", "{}: cannot create: {}; check that the directory exists and is writable", temp_path_.string(),
         std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  FERRY_ASSERT(fd_ >= 0, "write after commit");
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min(bytes, kMaxWrite));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("io", "{}: write failed after {} bytes: {}; free disk space or choose another output directory",
           temp_path_.string(), written_, std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  FERRY_ASSERT(fd_ >= 0, "commit twice");
  // Errors of delayed writes surface in fsync and close; both must succeed before the rename.
  if (::fsync(fd_) != 0)
    fail("io", "{}: fsync failed: {}; the disk may be full or failing", temp_path_.string(),
         std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    fail("io", "{}: close failed: {}", temp_path_.string(), std::strerror(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    fail("io", "cannot rename {} to {}: {}", temp_path_.string(), path_.string(), std::strerror(err));
  }
  sync_directory(parent_or_dot(path_));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Some file systems cannot open or fsync directories; the data itself is already durable.
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

bool exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  // EINVAL: a file system without exchange (some network and FUSE ones); ENOSYS: an old kernel.
  if (errno == EINVAL || errno == ENOSYS) return false;
  fail("io", "cannot exchange {} and {}: {}", a.string(), b.string(), std::strerror(errno));
}

}  // namespace ferry
