#include "train/disk_rate_cache.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "io/atomic_file.h"

namespace ferry {

namespace {

constexpr const char* kFilesystemKey = "filesystem";

}  // namespace

std::filesystem::path disk_rate_cache_path(const std::filesystem::path& dir, const std::string& filesystem) {
  return dir / (filesystem + ".json");
}

std::optional<DiskRates> read_cached_disk_rates(const std::filesystem::path& file,
                                                const std::string& filesystem) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  std::string text;
  try {
    text = read_text_file(file, "disk tier");
  } catch (const Error& e) {
    log_warn("disk tier: {}; measuring the disk again", e.what());
    return std::nullopt;
  }
  std::string error;
  const std::optional<nlohmann::json> json = try_parse_json(text, &error);
  if (!json || !json_has(*json, kFilesystemKey, &nlohmann::json::is_string) ||
      json->at(kFilesystemKey).get<std::string>() != filesystem ||
      !json_has(*json, "read_bytes_per_s", &nlohmann::json::is_number) ||
      !json_has(*json, "write_bytes_per_s", &nlohmann::json::is_number)) {
    log_warn("disk tier: {} is not a disk-rate file of filesystem {}{}; measuring the disk again",
             file.string(), filesystem, error.empty() ? "" : " (" + error + ")");
    return std::nullopt;
  }
  DiskRates r;
  r.read_bytes_per_s = json->at("read_bytes_per_s").get<double>();
  r.write_bytes_per_s = json->at("write_bytes_per_s").get<double>();
  if (!(r.read_bytes_per_s > 0) || !(r.write_bytes_per_s > 0)) return std::nullopt;
  return r;
}

DiskRates obtain_disk_rates(const std::filesystem::path& disk_dir, const std::string& filesystem,
                            const std::filesystem::path& cache_dir, size_t probe_bytes,
                            DiskRateOrigin* origin) {
  const std::filesystem::path file =
      cache_dir.empty() ? std::filesystem::path() : disk_rate_cache_path(cache_dir, filesystem);
  if (!file.empty()) {
    if (const std::optional<DiskRates> cached = read_cached_disk_rates(file, filesystem)) {
      log_info("disk tier: {} ({}) at {:.2f} GB/s read, {:.2f} GB/s write, as measured before ({})",
               disk_dir.string(), filesystem, cached->read_bytes_per_s / 1e9, cached->write_bytes_per_s / 1e9,
               file.string());
      if (origin != nullptr) *origin = DiskRateOrigin::Cache;
      return *cached;
    }
  }
  const DiskRates rates = measure_disk_rates(disk_dir, probe_bytes);
  log_info("disk tier: measured {} ({}) at {:.2f} GB/s read, {:.2f} GB/s write", disk_dir.string(),
           filesystem, rates.read_bytes_per_s / 1e9, rates.write_bytes_per_s / 1e9);
  if (origin != nullptr) *origin = DiskRateOrigin::Measured;
  if (file.empty()) return rates;
  const nlohmann::json json = {{kFilesystemKey, filesystem},
                               {"measured_in", disk_dir.string()},
                               {"probe_bytes", probe_bytes},
                               {"read_bytes_per_s", rates.read_bytes_per_s},
                               {"write_bytes_per_s", rates.write_bytes_per_s}};
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  try {
    FERRY_CHECK(!ec, "disk tier", "cannot create {}: {}", cache_dir.string(), ec.message());
    write_file_atomic(file, json.dump(2) + "\n");
  } catch (const Error& e) {
    log_warn("disk tier: the disk rates are not cached, so the next run measures them again: {}", e.what());
  }
  return rates;
}

}  // namespace ferry
