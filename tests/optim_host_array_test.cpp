// HostArray: the fp32 optimizer-state arrays in 2 MiB-aligned mappings advised into transparent
// huge pages (the kernel marks such a mapping "hg" in /proc/self/smaps), zero-filled, movable.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "optim/host_array.h"
#include "test_util.h"

namespace ferry {
namespace {

// The line starting with `key` ("VmFlags:", "Rss:") of the /proc/self/smaps entry of the mapping
// that contains `p`; "" if there is none.
std::string smaps_line(const void* p, const std::string& key) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind(key, 0) == 0) return line;
  }
  return "";
}

std::string vm_flags(const void* p) {
  return smaps_line(p, "VmFlags:");
}

// The resident bytes (Rss, in kB in smaps) of the mapping that contains `p`.
size_t resident_bytes(const void* p) {
  const std::string line = smaps_line(p, "Rss:");
  std::istringstream fields(line.empty() ? "0" : line.substr(4));
  size_t kib = 0;
  fields >> kib;
  return kib * 1024;
}

// commit() makes every page resident at once, and keeps what the array holds: zeros where nothing
// was written, the values where they were.
TEST(HostArray, CommitMakesEveryPageResidentAndKeepsTheContents) {
  const size_t count = size_t{48} << 20 >> 2;  // 48 MiB of floats: 24 huge pages
  HostArray a(count, "test");
  a.data()[12345] = 1.5f;
  a.data()[count - 1] = -2.0f;
  EXPECT_LT(resident_bytes(a.data()), size_t{24} << 20) << "an untouched array should not be resident yet";
  ThreadPool pool(4);
  EXPECT_FALSE(a.committed());
  a.commit(pool);
  EXPECT_TRUE(a.committed());
  EXPECT_GE(resident_bytes(a.data()), count * sizeof(float));
  EXPECT_EQ(a.data()[12345], 1.5f);
  EXPECT_EQ(a.data()[count - 1], -2.0f);
  for (size_t i = 0; i < count; i += 1021) {
    if (i != 12345) {
      ASSERT_EQ(a.data()[i], 0.0f) << i;
    }
  }
  a.data()[7] = 3.0f;
  a.commit(pool);  // already committed: nothing changes
  EXPECT_EQ(a.data()[7], 3.0f);
  EXPECT_EQ(a.data()[12345], 1.5f);
  HostArray moved(std::move(a));
  EXPECT_TRUE(moved.committed());
  EXPECT_FALSE(a.committed());
  HostArray empty;
  empty.commit(pool);  // nothing to commit
}

TEST(HostArray, LargeArraysAreHugePageAlignedAndAdvised) {
  const size_t n = 3 * (kHugePageBytes / 4) + 5;  // 3 huge pages and a bit
  HostArray a(n, "test array");
  ASSERT_EQ(a.size(), n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(HostArray::mapped_bytes(n), 3 * kHugePageBytes + 4096);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(a.data()[i], 0.0f);
  a.data()[n - 1] = 1.5f;
  const std::string mode = transparent_huge_page_mode();
  std::printf("transparent huge pages: %s; %s\n", mode.c_str(), vm_flags(a.data()).c_str());
  if (mode == "unavailable") GTEST_SKIP() << "no transparent huge pages in this kernel";
  EXPECT_TRUE(a.huge_pages());
  EXPECT_NE(vm_flags(a.data()).find(" hg"), std::string::npos) << vm_flags(a.data());
}

TEST(HostArray, SmallArraysUseOrdinaryPages) {
  HostArray a(1000, "test array");
  EXPECT_FALSE(a.huge_pages());
  EXPECT_EQ(HostArray::mapped_bytes(1000), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
  HostArray empty(0, "empty");
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

TEST(HostArray, AssignsMovesAndChecksTheCount) {
  const auto values = test::random_vector(100003, 4);
  HostArray a(values.size(), "test array");
  a.assign(values);
  const float* data = a.data();
  HostArray b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(std::vector<float>(b.data(), b.data() + b.size()), values);
  HostArray c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_THROW(c.assign(std::vector<float>(7)), Error);
}

}  // namespace
}  // namespace ferry
