#include "core/host_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"

namespace ferry {

namespace {

size_t round_up(size_t bytes, size_t to) {
  return (bytes + to - 1) / to * to;
}

// Pieces of whole huge pages, several a thread: 32 MiB.
constexpr size_t kPiece = 16 * kHugePageBytes;

}  // namespace

size_t host_pages_bytes(size_t bytes) {
  return round_up(bytes, 4096);
}

HostPages map_host_pages(size_t bytes) {
  HostPages pages;
  if (bytes == 0) return pages;
  const size_t size = host_pages_bytes(bytes);
  const bool huge = size >= kHugePageBytes;
  // mmap only promises 4 KiB alignment: a huge-page block maps one huge page more and keeps its
  // 2 MiB-aligned middle.
  const size_t reserve = huge ? size + kHugePageBytes : size;
  void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return pages;
  char* base = static_cast<char*>(p);
  if (huge) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(base);
    char* aligned = base + (round_up(start, kHugePageBytes) - start);
    if (aligned > base) munmap(base, static_cast<size_t>(aligned - base));
    const size_t tail = static_cast<size_t>(base + reserve - (aligned + size));
    if (tail > 0) munmap(aligned + size, tail);
    base = aligned;
    pages.huge_pages = madvise(base, size / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE) == 0;
  }
  pages.data = base;
  pages.mapped = size;
  return pages;
}

void unmap_host_pages(const HostPages& pages) noexcept {
  if (pages.data != nullptr) munmap(pages.data, pages.mapped);
}

int commit_host_pages(const HostPages& pages, ThreadPool& pool) {
  if (pages.data == nullptr) return 0;
  char* const base = static_cast<char*>(pages.data);
  std::atomic<int> error{0};
  pool.for_each_piece((pages.mapped + kPiece - 1) / kPiece, [&](size_t k) {
    char* const start = base + k * kPiece;
    const size_t bytes = std::min(kPiece, pages.mapped - k * kPiece);
    if (madvise(start, bytes, MADV_POPULATE_WRITE) == 0) return;
    if (errno != EINVAL) {
      int none = 0;
      error.compare_exchange_strong(none, errno);
      return;
    }
    // Kernels before 5.14: a write a 4 KiB page (an atomic add of 0) keeps what it holds.
    for (size_t o = 0; o < bytes; o += 4096)
      __atomic_fetch_add(reinterpret_cast<int*>(start + o), 0, __ATOMIC_RELAXED);
  });
  return error.load();
}

void copy_to_host_pages(void* dst, const void* src, size_t bytes, ThreadPool& pool) {
  if (bytes == 0) return;
  // Pieces start at huge-page boundaries of the destination.
  const uintptr_t start = reinterpret_cast<uintptr_t>(dst);
  const size_t head = std::min(bytes, static_cast<size_t>(round_up(start + 1, kPiece) - start));
  const size_t pieces = 1 + (bytes - head + kPiece - 1) / kPiece;
  pool.for_each_piece(pieces, [&](size_t k) {
    const size_t begin = k == 0 ? 0 : head + (k - 1) * kPiece;
    const size_t end = k == 0 ? head : std::min(bytes, begin + kPiece);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  });
}

}  // namespace ferry
