// core/host_pages: mappings of zeros whose whole huge pages are 2 MiB-aligned, committed and
// copied into on a thread pool in pieces of whole huge pages, with what they hold kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/host_pages.h"
#include "core/thread_pool.h"

namespace ferry {
namespace {

TEST(HostPages, LargeBlocksAreHugePageAlignedZerosOfWholePages) {
  for (const size_t bytes :
       {size_t{1}, size_t{4097}, kHugePageBytes - 1, kHugePageBytes + 12345, size_t{70} << 20}) {
    const HostPages pages = map_host_pages(bytes);
    ASSERT_NE(pages.data, nullptr) << bytes;
    EXPECT_EQ(pages.mapped, host_pages_bytes(bytes));
    EXPECT_EQ(pages.mapped % 4096, 0u);
    EXPECT_GE(pages.mapped, bytes);
    if (bytes >= kHugePageBytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pages.data) % kHugePageBytes, 0u) << bytes;
    }
    const auto* p = static_cast<const unsigned char*>(pages.data);
    for (size_t i = 0; i < pages.mapped; i += 997) ASSERT_EQ(p[i], 0) << bytes << " at " << i;
    unmap_host_pages(pages);
  }
  EXPECT_EQ(map_host_pages(0).data, nullptr);
}

TEST(HostPages, CommitKeepsWhatTheBlockHolds) {
  const size_t bytes = (size_t{40} << 20) + 333;  // 20 huge pages and a tail of small ones
  const HostPages pages = map_host_pages(bytes);
  ASSERT_NE(pages.data, nullptr);
  auto* p = static_cast<unsigned char*>(pages.data);
  const size_t marks[] = {0, 4096 * 3 + 5, kHugePageBytes * 7 + 1, bytes - 1};
  for (size_t i = 0; i < 4; ++i) p[marks[i]] = static_cast<unsigned char>(11 + i);
  ThreadPool pool(3);
  EXPECT_EQ(commit_host_pages(pages, pool), 0);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(p[marks[i]], 11 + i) << marks[i];
  for (size_t i = 1; i < pages.mapped; i += 4093) {
    bool marked = false;
    for (const size_t m : marks) marked |= m == i;
    if (!marked) {
      ASSERT_EQ(p[i], 0) << i;
    }
  }
  unmap_host_pages(pages);
}

// The copy cuts the destination at 32 MiB boundaries: a destination that starts between two, a
// copy shorter than one piece, one that ends on a boundary, and one of nothing.
TEST(HostPages, ParallelCopyEqualsMemcpyFromAnyStart) {
  const size_t total = (size_t{100} << 20) + 4096;
  const HostPages pages = map_host_pages(total);
  ASSERT_NE(pages.data, nullptr);
  std::vector<unsigned char> src(total);
  for (size_t i = 0; i < total; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  ThreadPool pool(4);
  auto* dst = static_cast<unsigned char*>(pages.data);
  const size_t piece = size_t{32} << 20;
  const struct {
    size_t offset, bytes;
  } cases[] = {{0, total}, {4096 + 7, total - 4096 - 7}, {piece - 100, 50}, {1, piece - 1}, {5, 0}};
  for (const auto& c : cases) {
    std::memset(dst, 0xAB, total);
    copy_to_host_pages(dst + c.offset, src.data() + c.offset, c.bytes, pool);
    for (size_t i = 0; i < total; i += (i % 4096 == 0 ? 1 : 61)) {
      const bool inside = i >= c.offset && i < c.offset + c.bytes;
      ASSERT_EQ(dst[i], inside ? src[i] : 0xAB)
          << "offset " << c.offset << ", bytes " << c.bytes << ", at " << i;
    }
    if (c.bytes > 0) {
      EXPECT_EQ(dst[c.offset], src[c.offset]);
      EXPECT_EQ(dst[c.offset + c.bytes - 1], src[c.offset + c.bytes - 1]);
    }
  }
  unmap_host_pages(pages);
}

}  // namespace
}  // namespace ferry
