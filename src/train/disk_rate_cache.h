// The disk tier's read and write rates, measured once per filesystem and cached
// (<cache dir>/disk-rates/<filesystem id>.json), so that a run does not spend a second or two
// probing its disk_dir at every start, and a disk_dir on another disk (another filesystem id:
// io/filesystem_id.h) is measured anew. A profile from another machine (`profile:`) brings its
// own rates and none of this runs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "profiler/disk_rate.h"

namespace ferry {

enum class DiskRateOrigin { Cache, Measured };

// <dir>/<filesystem>.json
std::filesystem::path disk_rate_cache_path(const std::filesystem::path& dir, const std::string& filesystem);

// The rates cached in `file` for `filesystem`; nothing when the file is missing, is not JSON of
// ours, holds another filesystem's rates or rates that are not positive (the caller measures).
std::optional<DiskRates> read_cached_disk_rates(const std::filesystem::path& file,
                                                const std::string& filesystem);

// The rates of `disk_dir`, known by `filesystem`: from the cache under `cache_dir`, or measured
// with a probe of `probe_bytes` and cached (a cache that cannot be written is reported, never
// fatal; an empty cache_dir caches nothing). `origin`, when given, says which.
DiskRates obtain_disk_rates(const std::filesystem::path& disk_dir, const std::string& filesystem,
                            const std::filesystem::path& cache_dir, size_t probe_bytes,
                            DiskRateOrigin* origin = nullptr);

}  // namespace ferry
