// Large blocks of host memory taken straight from the kernel (anonymous private mappings), for
// the optimizer state and the pinned buffers: 2 MiB-aligned with their whole huge pages advised
// (transparent huge pages, where the kernel offers them), zero-filled, and committed or filled
// on every thread of a pool rather than one page at a time on the caller's.
//
// Why the threads: the first touch of a page is a fault in which the kernel clears it. On the
// GPU machine one thread copied into fresh huge pages at 2.8 GB/s and sixteen at 24 GB/s (an 8B's
// 32 GB of masters: ~11 s against ~1.5 s), and pinned memory from the CUDA driver (cudaHostAlloc)
// came at ~2 GB/s whatever the caller's threads, where a mapping committed on the pool and then
// registered (cudaHostRegister) took a third of the time.
#pragma once

#include <cstddef>

namespace ferry {

class ThreadPool;

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whole 4 KiB pages that hold `bytes`: what a mapping of them takes.
size_t host_pages_bytes(size_t bytes);

struct HostPages {
  void* data = nullptr;
  size_t mapped = 0;        // host_pages_bytes(bytes)
  bool huge_pages = false;  // its whole huge pages were advised MADV_HUGEPAGE
};

// Maps host_pages_bytes(bytes) of zeros; blocks of a huge page or more start 2 MiB-aligned and
// their whole huge pages are advised (the tail past the last keeps 4 KiB pages: no round-up of up
// to 2 MiB a block). On failure, data is null and errno says why.
HostPages map_host_pages(size_t bytes);
void unmap_host_pages(const HostPages& pages) noexcept;

// Commits every page of the mapping now, keeping what it holds (MADV_POPULATE_WRITE, or a write
// a 4 KiB page where the kernel lacks it), in pieces of whole huge pages on the pool's threads (so
// that no two threads fault the same huge page). Returns 0, or the errno of a piece the kernel
// could not commit (ENOMEM: the host cannot hold it), for the caller to say what to do. Not from
// inside one of the pool's own tasks.
int commit_host_pages(const HostPages& pages, ThreadPool& pool);

// memcpy into host pages, in the same pieces on the pool's threads (their first-touch faults with
// them).
void copy_to_host_pages(void* dst, const void* src, size_t bytes, ThreadPool& pool);

}  // namespace ferry
