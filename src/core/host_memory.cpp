#include "core/host_memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ferry {

namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_small_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number after "<key>" at the start of a line ("RssAnon:   1234 kB", "file 5678"), times
// `unit`; nullopt when no line starts with the key.
std::optional<size_t> keyed_number(const std::string& text, const std::string& key, size_t unit) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const size_t digits = line.find_first_of("0123456789", key.size());
    if (digits == std::string::npos) return std::nullopt;
    return static_cast<size_t>(std::stoull(line.substr(digits))) * unit;
  }
  return std::nullopt;
}

std::optional<size_t> plain_number(const std::string& text) {
  const size_t digits = text.find_first_of("0123456789");
  if (digits == std::string::npos || text.find("max") != std::string::npos) return std::nullopt;
  return static_cast<size_t>(std::stoull(text.substr(digits)));
}

size_t headroom(size_t limit, size_t usage, size_t reclaimable) {
  const size_t used = usage - std::min(usage, reclaimable);
  return limit - std::min(limit, used);
}

// cgroup v1's memory controller: limits of 2^63 rounded down to a page mean none.
std::optional<size_t> cgroup_v1_headroom(const fs::path& dir) {
  const auto limit = read_small_file(dir / "memory.limit_in_bytes");
  const auto usage = read_small_file(dir / "memory.usage_in_bytes");
  const auto stat = read_small_file(dir / "memory.stat");
  if (!limit || !usage) return std::nullopt;
  const auto l = plain_number(*limit), u = plain_number(*usage);
  if (!l || !u || *l >= (size_t{1} << 62)) return std::nullopt;
  size_t reclaimable = 0;
  if (stat) {
    const size_t cache = keyed_number(*stat, "total_cache ", 1).value_or(0);
    const size_t shmem = keyed_number(*stat, "total_shmem ", 1).value_or(0);
    reclaimable = cache - std::min(cache, shmem);
  }
  return headroom(*l, *u, reclaimable);
}

struct CgroupBound {
  size_t headroom;
  std::string where;
};

// The tightest bound of `leaf` and its ancestors under the controller's mount `root`.
std::optional<CgroupBound> tightest_cgroup(const fs::path& root, const std::string& leaf, bool v2) {
  std::optional<CgroupBound> best;
  fs::path rel = fs::path(leaf).relative_path();
  while (true) {
    const fs::path dir = root / rel;
    std::optional<size_t> room;
    if (v2) {
      const auto max = read_small_file(dir / "memory.max");
      const auto current = read_small_file(dir / "memory.current");
      const auto stat = read_small_file(dir / "memory.stat");
      if (max && current) room = cgroup_v2_headroom(*max, *current, stat.value_or(""));
    } else {
      room = cgroup_v1_headroom(dir);
    }
    // Appended, not "/" + string: GCC 12 warns falsely (-Wrestrict) on that operator+ inlined.
    if (room && (!best || *room < best->headroom))
      best = CgroupBound{*room, std::string("/").append(rel.string())};
    if (rel.empty()) break;
    rel = rel.parent_path();
  }
  return best;
}

}  // namespace

ProcessMemory parse_process_status(const std::string& status) {
  ProcessMemory m;
  m.anon = keyed_number(status, "RssAnon:", 1024).value_or(0);
  m.shmem = keyed_number(status, "RssShmem:", 1024).value_or(0);
  m.file = keyed_number(status, "RssFile:", 1024).value_or(0);
  return m;
}

std::optional<ProcessMemory> read_process_memory(pid_t pid) {
  const auto text = read_small_file(pid == 0 ? fs::path("/proc/self/status")
                                             : fs::path("/proc") / std::to_string(pid) / "status");
  if (!text || text->find("RssAnon:") == std::string::npos) return std::nullopt;
  return parse_process_status(*text);
}

std::optional<size_t> parse_mem_available(const std::string& meminfo) {
  return keyed_number(meminfo, "MemAvailable:", 1024);
}

std::optional<size_t> cgroup_v2_headroom(const std::string& max, const std::string& current,
                                         const std::string& stat) {
  const auto limit = plain_number(max), usage = plain_number(current);
  if (!limit || !usage) return std::nullopt;
  // memory.stat's `file` includes tmpfs and shared memory, which cannot be dropped.
  const size_t file = keyed_number(stat, "file ", 1).value_or(0);
  const size_t shmem = keyed_number(stat, "shmem ", 1).value_or(0);
  return headroom(*limit, *usage, file - std::min(file, shmem));
}

HostMemoryAvailable host_memory_available(size_t own_bytes) {
  HostMemoryAvailable out;
  const auto meminfo = read_small_file("/proc/meminfo");
  const auto available = meminfo ? parse_mem_available(*meminfo) : std::nullopt;
  size_t free_bytes = available.value_or(0);
  out.source = available ? "MemAvailable" : "no MemAvailable in /proc/meminfo";
  if (const auto cgroups = read_small_file("/proc/self/cgroup")) {
    std::istringstream lines(*cgroups);
    std::string line;
    while (std::getline(lines, line)) {
      // "0::/path" (v2) or "4:memory:/path" (v1).
      const size_t first = line.find(':'), second = line.find(':', first + 1);
      if (first == std::string::npos || second == std::string::npos) continue;
      const std::string controllers = line.substr(first + 1, second - first - 1);
      const std::string path = line.substr(second + 1);
      std::optional<CgroupBound> bound;
      if (controllers.empty() && fs::exists("/sys/fs/cgroup/cgroup.controllers"))
        bound = tightest_cgroup("/sys/fs/cgroup", path, true);
      else if (controllers == "memory")
        bound = tightest_cgroup("/sys/fs/cgroup/memory", path, false);
      if (bound && (!available || bound->headroom < free_bytes)) {
        free_bytes = bound->headroom;
        out.source = fmt::format("the memory limit of cgroup {}", bound->where);
      }
    }
  }
  if (!available && out.source == "no MemAvailable in /proc/meminfo") return out;  // unknown: 0 bytes
  out.bytes = free_bytes + own_bytes;
  return out;
}

}  // namespace ferry
