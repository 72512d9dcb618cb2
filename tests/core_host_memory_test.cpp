// Reading what the host's memory is doing: /proc/<pid>/status, /proc/meminfo, cgroup limits.
#include <vector>

#include "core/host_memory.h"
#include "test_util.h"

namespace ferry {
namespace {

constexpr size_t kKiB = 1024, kGiB = size_t{1} << 30;

TEST(HostMemory, ProcessStatusCountsAnonymousAndSharedNotFilePages) {
  const ProcessMemory m = parse_process_status(
      "Name:\tferry\nVmRSS:\t  7340032 kB\nRssAnon:\t  5242880 kB\nRssFile:\t   1048576 kB\nRssShmem:\t "
      "1048576 kB\n");
  EXPECT_EQ(m.anon, 5242880 * kKiB);
  EXPECT_EQ(m.shmem, 1048576 * kKiB);
  EXPECT_EQ(m.file, 1048576 * kKiB);
  EXPECT_EQ(m.counted(), 6 * kGiB);
}

TEST(HostMemory, ThisProcessGrowsByWhatItTouches) {
  const auto before = read_process_memory();
  ASSERT_TRUE(before.has_value());
  std::vector<char> block(256u << 20, 1);  // touched: committed
  const auto after = read_process_memory();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->anon, before->anon + (200u << 20)) << static_cast<int>(block[12345]);
}

TEST(HostMemory, MemAvailableIsReadNotMemTotal) {
  EXPECT_EQ(parse_mem_available("MemTotal:       131072000 kB\nMemFree:         1000 kB\nMemAvailable:   "
                                "100000000 kB\n"),
            100000000 * kKiB);
  EXPECT_FALSE(parse_mem_available("MemTotal:       131072000 kB\n").has_value());
}

TEST(HostMemory, CgroupHeadroomLeavesOutReclaimablePageCacheButNotShmem) {
  // 64 GiB limit, 40 GiB charged of which 10 GiB page cache, 2 GiB of it shmem: 32 GiB in use.
  const std::string stat = "anon 30064771072\nfile 10737418240\nshmem 2147483648\n";
  EXPECT_EQ(cgroup_v2_headroom("68719476736\n", "42949672960\n", stat), 32 * kGiB);
  EXPECT_FALSE(cgroup_v2_headroom("max\n", "42949672960\n", stat).has_value());
  // Over its limit (a charge racing the read): no headroom, not a wrapped size.
  EXPECT_EQ(cgroup_v2_headroom("1073741824\n", "4294967296\n", "file 0\n"), 0u);
}

TEST(HostMemory, AvailableIsAtMostMemAvailablePlusWhatTheProcessHolds) {
  const auto own = read_process_memory();
  ASSERT_TRUE(own.has_value());
  const HostMemoryAvailable a = host_memory_available(own->counted());
  EXPECT_GT(a.bytes, own->counted());
  EXPECT_FALSE(a.source.empty());
}

}  // namespace
}  // namespace ferry
