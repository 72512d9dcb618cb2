// An fp32 array of optimizer state in host memory (fp32 masters, AdamW m and v of one unit),
// allocated once, at its size, in transparent huge pages where the kernel offers them.
//
// Why huge pages: the CPU AdamW streams 12+ bytes/param through these arrays every step (~100 GB
// for an 8B model). With 4 KiB pages that is 25 million TLB entries' worth of memory, and page
// walks cost a noticeable share of a bandwidth-bound pass; a 2 MiB page covers 512 times more.
// The arrays are core/host_pages.h's mappings: 2 MiB-aligned with their whole huge pages advised
// MADV_HUGEPAGE before anything touches them, so their first-touch faults (the masters' copy, the
// commit) can take whole huge pages. Where the advice is refused (a kernel without transparent
// huge pages), the array keeps 4 KiB pages: huge_pages() says so and the owner logs and counts it.
//
// The memory comes zero-filled and is committed page by page as it is first written, or all at
// once by commit(): the trainer commits every array before the first step, so that the first
// update's writes of m and v do not fault 8 bytes per parameter into a step (a 3B model's first
// CPU pass took 2.5 s longer), and a host that cannot hold the state says so before training.
// Both the copy in and the commit run on a thread pool (the faults clear pages on every thread).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "core/host_pages.h"
#include "core/thread_pool.h"

namespace ferry {

class HostArray {
 public:
  HostArray() = default;
  // `count` zeros. Throws ferry::Error, naming `what`, when the host cannot map the memory.
  HostArray(size_t count, const char* what);
  ~HostArray();
  HostArray(HostArray&& other) noexcept;
  HostArray& operator=(HostArray&& other) noexcept;
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;

  float* data() { return static_cast<float*>(pages_.data); }
  const float* data() const { return static_cast<const float*>(pages_.data); }
  size_t size() const { return count_; }
  std::span<float> span() { return {data(), count_}; }
  std::span<const float> span() const { return {data(), count_}; }
  // Copies `values` in on `pool`'s threads; their count must be size().
  void assign(std::span<const float> values, ThreadPool& pool = ThreadPool::global());
  // Commits every page of the mapping now, on `pool`'s threads; the contents stay as they are. Once
  // committed, later calls return at once (the pages stay committed until the array is freed).
  void commit(ThreadPool& pool);
  bool committed() const { return committed_; }
  // The mapping is 2 MiB-aligned and advised MADV_HUGEPAGE.
  bool huge_pages() const { return pages_.huge_pages; }

  // The bytes an array of `count` floats maps, whole 4 KiB pages (what the memory model counts).
  static size_t mapped_bytes(size_t count);
  // The bytes as another element type: a lean optimizer state's arrays (bf16, int8, ...) are
  // HostArrays of host_array_floats(bytes) floats.
  template <typename T>
  T* as() {
    return static_cast<T*>(pages_.data);
  }

 private:
  HostPages pages_;
  size_t count_ = 0;
  bool committed_ = false;
};

// Floats that hold `bytes` bytes.
inline size_t host_array_floats(size_t bytes) {
  return (bytes + sizeof(float) - 1) / sizeof(float);
}

// The system's transparent-huge-page mode ("always", "madvise" or "never"), from
// /sys/kernel/mm/transparent_hugepage/enabled; "unavailable" where the file is missing.
std::string transparent_huge_page_mode();

}  // namespace ferry
