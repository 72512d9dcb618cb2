#include "device/memory_ledger.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

MemoryLedger::MemoryLedger(std::string owner, std::string kind, size_t capacity)
    : owner_(std::move(owner)), kind_(std::move(kind)), capacity_(capacity) {}

void MemoryLedger::admit(size_t bytes, const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_ - in_use_) {
    fail(owner_.c_str(),
         "out of {}: asked for {} while {} of {} are in use (what={}); the plan must fit the memory budget",
         kind_, format_bytes(bytes), format_bytes(in_use_), format_bytes(capacity_), what ? what : "?");
  }
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
}

void MemoryLedger::cancel(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(bytes <= in_use_);
  in_use_ -= bytes;
}

void MemoryLedger::record(void* pointer, size_t bytes, const char* what, BlockOrigin origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool inserted =
      blocks_.emplace(static_cast<const char*>(pointer), Block{bytes, what ? what : "?", origin}).second;
  FERRY_ASSERT(inserted, "the allocator returned a block that is already in use");
}

size_t MemoryLedger::forget(void* pointer, BlockOrigin origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = blocks_.find(static_cast<const char*>(pointer));
  FERRY_ASSERT(it != blocks_.end(), "release of a pointer this device did not allocate (or released twice)");
  FERRY_ASSERT(
      it->second.origin == origin,
      "memory registered with the device is unregistered, not released (and allocated memory released)");
  const size_t bytes = it->second.bytes;
  blocks_.erase(it);
  in_use_ -= bytes;
  return bytes;
}

bool MemoryLedger::contains(const void* pointer, size_t bytes) const {
  const char* p = static_cast<const char*>(pointer);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(p);  // first block starting after p
  if (it == blocks_.begin()) return false;
  --it;
  const size_t offset = static_cast<size_t>(p - it->first);
  return offset <= it->second.bytes && bytes <= it->second.bytes - offset;
}

MemoryStats MemoryLedger::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats s;
  s.capacity = capacity_;
  s.in_use = in_use_;
  s.peak = peak_;
  return s;
}

std::vector<MemoryLedger::BlockInfo> MemoryLedger::blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<BlockInfo> out;
  out.reserve(blocks_.size());
  for (const auto& [p, block] : blocks_) out.push_back({const_cast<char*>(p), block.what, block.origin});
  return out;
}

}  // namespace ferry
