#include "profiler/disk_rate.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "profiler/profile_timing.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "profile";
constexpr size_t kBlock =
    size_t{8} << 20;  // large sequential requests, as a checkpoint or state tier issues them

// The probe file: closed and removed when the measurement ends, however it ends.
class ProbeFile {
 public:
  explicit ProbeFile(std::filesystem::path path) : path_(std::move(path)) {}
  ~ProbeFile() {
    close();
    ::unlink(path_.c_str());
  }
  ProbeFile(const ProbeFile&) = delete;
  ProbeFile& operator=(const ProbeFile&) = delete;

  void open(int flags) {
    close();
    fd_ = ::open(path_.c_str(), flags | O_CLOEXEC, 0600);
    FERRY_CHECK(fd_ >= 0, kWhere, "cannot open the disk probe {}: {}; give a writable directory to measure",
                path_.string(), std::strerror(errno));
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace

DiskRates measure_disk_rates(const std::filesystem::path& dir, size_t bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create {} for the disk probe: {}", dir.string(), ec.message());
  ProbeFile file(dir / ("ferry-disk-probe-" + std::to_string(::getpid()) + ".tmp"));
  bytes = std::max(bytes / kBlock, size_t{1}) * kBlock;

  // Random bytes: a compressing filesystem (btrfs, zfs) would store zeros for free.
  std::vector<uint64_t> block(kBlock / sizeof(uint64_t));
  std::mt19937_64 rng(::getpid());
  for (auto& word : block) word = rng();

  DiskRates rates;
  file.open(O_WRONLY | O_CREAT | O_TRUNC);
  auto start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes;) {
    const char* p = reinterpret_cast<const char*>(block.data());
    const ssize_t n = ::write(file.fd(), p + done % kBlock, kBlock - done % kBlock);
    if (n < 0 && errno == EINTR) continue;
    FERRY_CHECK(n > 0, kWhere,
                "writing the disk probe {} failed after {} bytes: {}; free disk space or give another "
                "directory",
                file.path().string(), done, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  FERRY_CHECK(::fsync(file.fd()) == 0, kWhere, "fsync of the disk probe {} failed: {}", file.path().string(),
              std::strerror(errno));
  rates.write_bytes_per_s = static_cast<double>(bytes) / seconds_since(start);

  // The pages are clean after fsync, so DONTNEED drops them and the read comes from the disk.
  ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_DONTNEED);
  file.open(O_RDONLY);
  ::posix_fadvise(file.fd(), 0, 0, POSIX_FADV_DONTNEED);
  start = std::chrono::steady_clock::now();
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::read(file.fd(), block.data(), kBlock);
    if (n < 0 && errno == EINTR) continue;
    FERRY_CHECK(n > 0, kWhere, "reading the disk probe {} back failed after {} bytes: {}",
                file.path().string(), done, n == 0 ? "unexpected end of file" : std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  rates.read_bytes_per_s = static_cast<double>(bytes) / seconds_since(start);
  return rates;
}

}  // namespace ferry
