// The bookkeeping behind a Device's memory: a hard capacity, the bytes in use, the peak, and which
// block is which, so that an allocation past the budget is refused with the numbers and a copy can be
// checked to stay inside one allocation. Thread-safe. Both devices (sim, CUDA) keep one for device
// memory and one for pinned host memory.
//
// Allocation is two-phase so that the slow allocator call runs without the lock:
//   admit(bytes, what)  -> counts the bytes as in use, or throws when they do not fit;
//   record(p, bytes)    -> once the allocator returned p;  cancel(bytes) if it failed instead.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "device/device.h"

namespace ferry {

// Whether the owner allocated a block (and frees it) or only registered memory allocated
// elsewhere (Device::register_pinned: unregistered, never freed).
enum class BlockOrigin { Allocated, Registered };

class MemoryLedger {
 public:
  struct BlockInfo {
    void* pointer;
    std::string what;
    BlockOrigin origin;
  };

  // `owner` prefixes error messages ("sim device", "cuda device 0"); `kind` names the memory
  // ("memory", "pinned memory").
  MemoryLedger(std::string owner, std::string kind, size_t capacity);
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  // Counts `bytes` as in use, or throws ferry::Error
  // "[owner] out of <kind>: asked for X while Y of Z are in use (what=...); ..." when they do not fit.
  void admit(size_t bytes, const char* what);
  // Gives back bytes admitted for an allocation that then failed.
  void cancel(size_t bytes);
  void record(void* pointer, size_t bytes, const char* what, BlockOrigin origin = BlockOrigin::Allocated);
  // Forgets a recorded block of that origin and gives its bytes back; returns its size. A pointer
  // that is not the start of a recorded block of that origin is a bug of the caller (assertion).
  size_t forget(void* pointer, BlockOrigin origin = BlockOrigin::Allocated);

  // True when [pointer, pointer + bytes) lies inside one recorded block.
  bool contains(const void* pointer, size_t bytes) const;
  MemoryStats stats() const;
  size_t capacity() const { return capacity_; }
  // Blocks still recorded (for the owner's destructor), with their names and origins.
  std::vector<BlockInfo> blocks() const;

 private:
  struct Block {
    size_t bytes;
    std::string what;
    BlockOrigin origin;
  };
  const std::string owner_;
  const std::string kind_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
  std::map<const char*, Block> blocks_;  // by start address
};

}  // namespace ferry
