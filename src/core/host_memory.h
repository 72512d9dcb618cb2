// What the host's memory is doing: the resident memory of a process that only it can give back
// (what the kernel's OOM killer weighs), and the memory this machine can give a run now.
//
// Counted resident memory is RssAnon + RssShmem of /proc/<pid>/status: anonymous pages (heap,
// mmap'd optimizer state, the simulated device) and shared memory (CUDA's page-locked buffers are
// shmem mappings). RssFile is left out: a mapped model file's pages are page cache, which the
// kernel reclaims instead of killing.
//
// What the machine can give is MemAvailable of /proc/meminfo, and, when the process runs in a
// cgroup with a memory limit (containers, Slurm), the least headroom of that cgroup and of each
// cgroup above it: memory.max less what is charged to it and not reclaimable (cgroup v2), or
// memory.limit_in_bytes less usage (v1). The memory the process already holds counts as
// available to it: a run reuses it (the loaded weights become the fp32 masters).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

namespace ferry {

struct ProcessMemory {
  size_t anon = 0;   // RssAnon
  size_t shmem = 0;  // RssShmem
  size_t file = 0;   // RssFile
  size_t counted() const { return anon + shmem; }
};

// The process `pid` (0: this one); nullopt where /proc has no such file.
std::optional<ProcessMemory> read_process_memory(pid_t pid = 0);
// The same from the text of a /proc/<pid>/status file.
ProcessMemory parse_process_status(const std::string& status);

struct HostMemoryAvailable {
  size_t bytes = 0;    // what a run of this process may hold in all, its own memory included
  std::string source;  // what bounds it: "MemAvailable", "cgroup /slurm/job_1 (memory.max 64.00 GiB)"
};

// This machine now; for a process holding `own_bytes` of counted memory.
HostMemoryAvailable host_memory_available(size_t own_bytes);

// The pieces, from the files' text, so that tests can give them.
// MemAvailable of /proc/meminfo, in bytes; nullopt when the line is missing (kernels before 3.14).
std::optional<size_t> parse_mem_available(const std::string& meminfo);
// The headroom of one cgroup v2 directory from its memory.max, memory.current and memory.stat:
// nullopt for "max" (no limit). Reclaimable page cache (memory.stat's file less shmem) is not in use.
std::optional<size_t> cgroup_v2_headroom(const std::string& max, const std::string& current,
                                         const std::string& stat);

}  // namespace ferry
