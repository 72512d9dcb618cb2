// Sequential read and write rates of the disk under a directory, for the machine profile's disk
// tier (DESIGN.md §7: optimizer state on NVMe).
#pragma once

#include <cstddef>
#include <filesystem>

namespace ferry {

struct DiskRates {
  double read_bytes_per_s = 0.0;
  double write_bytes_per_s = 0.0;
};

// Writes a probe file of `bytes` random bytes in `dir` and fsyncs it (the write rate: what reaches
// the disk, not the page cache), drops the file's pages from the page cache (posix_fadvise
// DONTNEED) and reads it back (the read rate), then removes it, also on error. On a RAM-backed
// filesystem (tmpfs) the rates are memory rates: that is what such a directory offers.
DiskRates measure_disk_rates(const std::filesystem::path& dir, size_t bytes);

}  // namespace ferry
