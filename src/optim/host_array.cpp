#include "optim/host_array.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"
#include "device/memory_ledger.h"

namespace ferry {

namespace {

size_t round_up(size_t bytes, size_t to) {
  return (bytes + to - 1) / to * to;
}

}  // namespace

size_t HostArray::mapped_bytes(size_t count) {
  return round_up(count * sizeof(float), 4096);
}

HostArray::HostArray(size_t count, const char* what) : count_(count) {
  if (count == 0) return;
  const size_t bytes = count * sizeof(float);
  const bool huge = bytes >= kHugePage;
  // For a huge-page array, map one huge page more than needed and cut the mapping down to its
  // 2 MiB-aligned middle: mmap only promises 4 KiB alignment.
  const size_t size = mapped_bytes(count);
  const size_t reserve = huge ? size + kHugePage : size;
  // Only whole huge pages are advised: the array's last partial one stays in 4 KiB pages rather
  // than commit up to 2 MiB nobody uses (some 200 MB over the 102 arrays of an 8B model).
  const size_t advised = size / kHugePage * kHugePage;
  void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fail("engine",
         "the host could not map {} for {} ({}); the optimizer state needs 12 bytes per parameter of "
         "host memory in fp32 (4-6 in a lean optimizer_state): free memory, or train a smaller model on "
         "this machine",
         format_bytes(bytes), what, std::strerror(errno));
  }
  char* base = static_cast<char*>(p);
  if (huge) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(base);
    char* aligned = base + (round_up(start, kHugePage) - start);
    if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
    const size_t tail = static_cast<size_t>(base + reserve - (aligned + size));
    if (tail > 0) munmap(aligned + size, tail);
    base = aligned;
    huge_pages_ = madvise(base, advised, MADV_HUGEPAGE) == 0;
  }
  data_ = reinterpret_cast<float*>(base);
  mapped_bytes_ = size;
}

HostArray::~HostArray() {
  release();
}

HostArray::HostArray(HostArray&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      huge_pages_(std::exchange(other.huge_pages_, false)) {}

HostArray& HostArray::operator=(HostArray&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    count_ = std::exchange(other.count_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    huge_pages_ = std::exchange(other.huge_pages_, false);
  }
  return *this;
}

void HostArray::release() noexcept {
  if (data_ != nullptr) munmap(data_, mapped_bytes_);
  data_ = nullptr;
}

void HostArray::assign(std::span<const float> values) {
  FERRY_CHECK(values.size() == count_, "engine",
              "{} values given for an array of {}; the weights do not match the "
              "model's layout",
              values.size(), count_);
  if (count_ > 0) std::memcpy(data_, values.data(), count_ * sizeof(float));
}

void HostArray::commit(ThreadPool& pool) {
  if (data_ == nullptr) return;
  // Pieces of whole huge pages, so that no two threads fault the same one.
  constexpr size_t kPiece = 16 * kHugePage;
  char* base = reinterpret_cast<char*>(data_);
  const size_t pieces = (mapped_bytes_ + kPiece - 1) / kPiece;
  pool.parallel_for(pieces, [&](size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) {
      char* start = base + k * kPiece;
      const size_t bytes = std::min(kPiece, mapped_bytes_ - k * kPiece);
      if (madvise(start, bytes, MADV_POPULATE_WRITE) == 0) continue;
      FERRY_CHECK(
          errno == EINVAL, "engine",
          "the host could not commit the {} of fp32 optimizer state ({}); it needs 12 bytes per parameter "
          "of host memory: free host memory, or train a smaller model on this machine",
          format_bytes(mapped_bytes_), std::strerror(errno));
      // Kernels before 5.14: a read and a write of every 4 KiB page keeps what it holds.
      for (size_t o = 0; o < bytes; o += 4096) {
        volatile char* p = start + o;
        *p = *p;
      }
    }
  });
}

std::string transparent_huge_page_mode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!file || !std::getline(file, line)) return "unavailable";
  // "always [madvise] never": the bracketed word is the mode.
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return line;
  return line.substr(open + 1, close - open - 1);
}

}  // namespace ferry
