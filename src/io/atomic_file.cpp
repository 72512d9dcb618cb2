#include "io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc 2.28)
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/env_switch.h"
#include "core/error.h"
#include "io/direct_file_writer.h"

namespace ferry {

namespace {
// FERRY_DIRECT_SAVES=0 keeps every save on write() and the page cache: for a file system that
// takes O_DIRECT but serves it slowly (some network and FUSE file systems).
std::atomic<bool> g_direct_writes{env_switch_on("FERRY_DIRECT_SAVES")};

// Linux moves at most about 2 GiB per write(); larger tensors are written in pieces.
constexpr size_t kMaxWrite = size_t{1} << 30;

std::string bytes_text(uint64_t bytes) {
  return fmt::format("{} bytes ({:.2f} MiB)", bytes, static_cast<double>(bytes) / 1048576.0);
}

bool out_of_space(int err) {
  return err == ENOSPC || err == EDQUOT || err == EFBIG;
}

// "; its file system has F free", or nothing where the file system cannot say.
std::string free_space_text(const std::filesystem::path& path) {
  struct statvfs fs {};
  if (::statvfs(containing_directory(path).c_str(), &fs) != 0) return {};
  return fmt::format("; its file system has {} free",
                     bytes_text(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize));
}

// What a user needs to act on a write that ran out of space (out_of_space(err)): which limit was
// hit, how much the file needed and how much the file system has left.
std::string space_advice(int err, const std::filesystem::path& path, size_t written, size_t expected) {
  const char* name = err == ENOSPC ? "ENOSPC" : err == EDQUOT ? "EDQUOT" : "EFBIG";
  std::string what = fmt::format("{} ({})", std::strerror(err), name);
  const std::string sizes = (expected > 0 ? fmt::format(" after {} of the {} the file needs",
                                                        bytes_text(written), bytes_text(expected))
                                          : fmt::format(" after {}", bytes_text(written))) +
                            free_space_text(path);
  const char* advice = err == EFBIG ? "raise the file size limit (ulimit -f) or write to another file system"
                                    : "free disk space or choose another output directory";
  return fmt::format("{}{}; {}", what, sizes, advice);
}

int open_or_fail(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0)
    fail("io", "{}: cannot create: {}; check that the directory exists and is writable", path.string(),
         std::strerror(errno));
  return fd;
}

bool same_file(int fd, const std::filesystem::path& path) {
  struct stat held {
  }, named{};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

std::atomic<uint64_t> g_own_temp_names{0};
}  // namespace

// PATH.tmp is locked (flock, on a descriptor of its own that stays open until after the rename)
// while it is written: a second process writing the same PATH at once, such as two runs sharing a
// cache directory, finds it locked and writes beside it under a name of its own instead of
// truncating a file about to be published. A PATH.tmp that a killed writer left is unlocked: it is
// taken and emptied, so a crash leaves at most one such file per PATH. Where the file system
// cannot lock, PATH.tmp is used as it is.
AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  temp_path_ = path_;
  temp_path_ += ".tmp";
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int lock = open_or_fail(temp_path_, O_RDONLY | O_CREAT);
    if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(lock);
      if (err != EWOULDBLOCK) break;  // no locks here
      temp_path_ = path_;
      temp_path_ += fmt::format(".tmp.{}.{}", ::getpid(), g_own_temp_names.fetch_add(1));
      fd_ = open_or_fail(temp_path_, O_WRONLY | O_CREAT | O_EXCL);
      return;
    }
    // Its writer may have published it (renamed it onto PATH) between the open and the lock.
    if (same_file(lock, temp_path_)) {
      lock_fd_ = lock;
      break;
    }
    ::close(lock);
  }
  fd_ = open_or_fail(temp_path_, O_WRONLY | O_CREAT | O_TRUNC);
}

AtomicFile::~AtomicFile() {
  direct_.reset();  // waits for its writes in flight before the file goes
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void AtomicFile::reserve(size_t total_bytes) {
  FERRY_ASSERT(fd_ >= 0, "reserve after commit");
  expected_ = total_bytes;
  if (total_bytes == 0) return;
  // KEEP_SIZE: the blocks are allocated but the file's length grows only with the writes, so a
  // file written shorter than reserved has no trailing zeros.
  if (::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(total_bytes)) != 0) {
    // Other errors (a file system that cannot reserve) leave the writes to report a full disk.
    const int err = errno;
    if (out_of_space(err))
      fail("io", "{}: cannot set aside space: {}", temp_path_.string(),
           space_advice(err, temp_path_, 0, expected_));
  }
  if (total_bytes >= kDirectWriteMinBytes && written_ == 0 && !direct_ && g_direct_writes.load())
    direct_ = DirectFileWriter::open(temp_path_, total_bytes);
}

void AtomicFile::allow_direct_writes(bool allow) {
  g_direct_writes.store(allow);
}

void AtomicFile::write(const void* data, size_t bytes) {
  FERRY_ASSERT(fd_ >= 0, "write after commit");
  if (direct_) {
    through_direct([&] { direct_->write(data, bytes); });
    written_ += bytes;
    return;
  }
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min(bytes, kMaxWrite));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      if (out_of_space(err))
        fail("io", "{}: write failed: {}", temp_path_.string(),
             space_advice(err, temp_path_, written_, expected_));
      fail("io", "{}: write failed after {}: {}; check the disk and the output directory",
           temp_path_.string(), bytes_text(written_), std::strerror(err));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFile::write_filled(size_t bytes, size_t granule,
                              const std::function<void(std::byte* dst, size_t at, size_t count)>& fill) {
  FERRY_ASSERT(fd_ >= 0, "write after commit");
  if (direct_) {
    through_direct([&] { direct_->write_filled(bytes, granule, fill); });
    written_ += bytes;
    return;
  }
  const size_t piece = std::max(granule, DirectFileWriter::kBufferBytes / granule * granule);
  std::vector<std::byte> buffer(std::min(piece, bytes));
  for (size_t at = 0; at < bytes; at += piece) {
    const size_t count = std::min(piece, bytes - at);
    fill(buffer.data(), at, count);
    write(buffer.data(), count);
  }
}

void AtomicFile::through_direct(const std::function<void()>& work) {
  try {
    work();
  } catch (const Error& e) {
    // The request's failure names the file, the offset, the errno and what to do; the sizes are
    // said here.
    fail("io", "{} (the file needs {}{})", e.what(), bytes_text(expected_), free_space_text(temp_path_));
  }
}

void AtomicFile::commit() {
  FERRY_ASSERT(fd_ >= 0, "commit twice");
  if (direct_) {
    // The last block went out whole: the file is cut back to the bytes written.
    through_direct([&] { direct_->finish(); });
    direct_.reset();
    if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0)
      fail("io", "{}: cannot set its length to {}: {}; check the disk and the output directory",
           temp_path_.string(), bytes_text(written_), std::strerror(errno));
  }
  // Errors of delayed writes surface in fsync and close; both must succeed before the rename.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    if (out_of_space(err))
      fail("io", "{}: fsync failed: {}", temp_path_.string(),
           space_advice(err, temp_path_, written_, expected_));
    fail("io", "{}: fsync failed: {}; the disk may be failing", temp_path_.string(), std::strerror(err));
  }
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
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  sync_directory(containing_directory(path_));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

std::filesystem::path containing_directory(const std::filesystem::path& path) {
  const std::filesystem::path parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Some file systems cannot open or fsync directories; the data itself is already durable.
  if (fd < 0) return;
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // EINVAL, ENOTSUP: a file system that cannot sync a directory (its renames are as durable as it
  // makes them). Anything else (EIO) means a rename may not survive a crash: a save must not be
  // taken for durable then.
  if (rc != 0 && error != EINVAL && error != ENOTSUP && error != EROFS)
    fail("io", "cannot make the entries of {} durable (fsync): {}; check the disk (dmesg)", dir.string(),
         std::strerror(error));
}

bool exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  // EINVAL: a file system without exchange (some network and FUSE ones); ENOSYS: an old kernel.
  if (errno == EINVAL || errno == ENOSYS) return false;
  fail("io", "cannot exchange {} and {}: {}", a.string(), b.string(), std::strerror(errno));
}

}  // namespace ferry
