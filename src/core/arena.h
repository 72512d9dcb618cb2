// A bump allocator over memory someone else owns (a host vector, a GPU slot, a pinned slab).
//
// Construct with base == nullptr to measure: take() then only adds up the bytes a layout needs,
// so the caller can size the real allocation once and carve it with the same code.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "core/tensor.h"

namespace ferry {

class Arena {
 public:
  static constexpr size_t kAlignment = 256;

  Arena(void* base, size_t capacity) : base_(static_cast<char*>(base)), capacity_(capacity) {}
  static Arena measuring() { return Arena(nullptr, static_cast<size_t>(-1)); }

  Tensor take(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dtype, dims);
    const size_t offset = (used_ + kAlignment - 1) / kAlignment * kAlignment;
    FERRY_ASSERT(offset + t.bytes() <= capacity_, "arena too small for its layout");
    used_ = offset + t.bytes();
    if (base_ != nullptr)
      t.data = base_ + offset;
    else
      t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(1));  // non-empty while measuring
    return t;
  }
  size_t used() const { return used_; }
  bool measuring_only() const { return base_ == nullptr; }

 private:
  char* base_;
  size_t capacity_;
  size_t used_ = 0;
};

}  // namespace ferry
