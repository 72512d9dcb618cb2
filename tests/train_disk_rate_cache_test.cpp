// The disk tier's rates are measured once per filesystem and cached: a second start on the same
// filesystem reads them (no probe), another filesystem id is measured anew, and a cache file that
// is corrupt or holds another filesystem's rates is measured over, never trusted.
#include <gtest/gtest.h>

#include <fstream>

#include "io/filesystem_id.h"
#include "test_util.h"
#include "train/disk_rate_cache.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr size_t kProbe = size_t{4} << 20;

TEST(DiskRateCache, MeasuredOncePerFilesystemThenRead) {
  test::ScratchDir dir("disk-rates");
  const fs::path disk = dir / "disk", cache = dir / "cache";
  fs::create_directories(disk);
  DiskRateOrigin origin = DiskRateOrigin::Cache;
  const DiskRates first = obtain_disk_rates(disk, "fs-a", cache, kProbe, &origin);
  EXPECT_EQ(origin, DiskRateOrigin::Measured);
  EXPECT_GT(first.read_bytes_per_s, 0);
  EXPECT_GT(first.write_bytes_per_s, 0);
  ASSERT_TRUE(fs::exists(disk_rate_cache_path(cache, "fs-a")));
  // The same filesystem: the cached numbers, bit for bit.
  const DiskRates again = obtain_disk_rates(disk, "fs-a", cache, kProbe, &origin);
  EXPECT_EQ(origin, DiskRateOrigin::Cache);
  EXPECT_EQ(again.read_bytes_per_s, first.read_bytes_per_s);
  EXPECT_EQ(again.write_bytes_per_s, first.write_bytes_per_s);
  // Another disk: measured, and cached beside the first.
  obtain_disk_rates(disk, "fs-b", cache, kProbe, &origin);
  EXPECT_EQ(origin, DiskRateOrigin::Measured);
  EXPECT_TRUE(fs::exists(disk_rate_cache_path(cache, "fs-b")));
  // No cache directory: measured every time.
  obtain_disk_rates(disk, "fs-a", fs::path(), kProbe, &origin);
  EXPECT_EQ(origin, DiskRateOrigin::Measured);
}

TEST(DiskRateCache, ABadOrForeignFileIsMeasuredOver) {
  test::ScratchDir dir("disk-rates");
  const fs::path disk = dir / "disk", cache = dir / "cache";
  fs::create_directories(disk);
  fs::create_directories(cache);
  const fs::path file = disk_rate_cache_path(cache, "fs-a");
  for (const std::string& text :
       {std::string("not json"),
        std::string(R"({"filesystem": "fs-b", "read_bytes_per_s": 1e9, "write_bytes_per_s": 1e9})"),
        std::string(R"({"filesystem": "fs-a", "read_bytes_per_s": 0, "write_bytes_per_s": 1e9})"),
        std::string(R"({"filesystem": "fs-a", "read_bytes_per_s": "fast"})"),
        std::string(R"({"filesystem": "fs-a", "read_bytes_per_s": 1e9})"),
        std::string(R"({"filesystem": 5, "read_bytes_per_s": 1e9, "write_bytes_per_s": 1e9})")}) {
    SCOPED_TRACE(text);
    std::ofstream(file) << text;
    EXPECT_FALSE(read_cached_disk_rates(file, "fs-a").has_value());
    DiskRateOrigin origin = DiskRateOrigin::Cache;
    obtain_disk_rates(disk, "fs-a", cache, kProbe, &origin);
    EXPECT_EQ(origin, DiskRateOrigin::Measured);
    EXPECT_TRUE(read_cached_disk_rates(file, "fs-a").has_value()) << "rewritten with the measurement";
  }
  std::ofstream(file) << R"({"filesystem": "fs-a", "read_bytes_per_s": 2e9, "write_bytes_per_s": 1.5e9})";
  const std::optional<DiskRates> r = read_cached_disk_rates(file, "fs-a");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->read_bytes_per_s, 2e9);
  EXPECT_EQ(r->write_bytes_per_s, 1.5e9);
}

// Two directories of one filesystem share an id; /proc is another filesystem.
TEST(FilesystemId, SameFilesystemSameIdOtherFilesystemAnother) {
  test::ScratchDir dir("fs-id");
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const std::string a = filesystem_id(dir / "a");
  EXPECT_EQ(a, filesystem_id(dir / "b"));
  EXPECT_NE(a, filesystem_id("/proc"));
  EXPECT_EQ(a.find('/'), std::string::npos) << "a file name";
  EXPECT_THROW(filesystem_id(dir / "missing"), Error);
}

}  // namespace
}  // namespace ferry
