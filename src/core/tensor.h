// A non-owning view of a contiguous, row-major tensor: a pointer, a dtype and up to 4 dims.
//
// Ops take views; owners (unit buffers, activation arenas, device slots) keep the memory alive.
// An empty view (data == nullptr) marks an optional argument that is absent.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace ferry {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, 4> shape{0, 0, 0, 0};
  int ndim = 0;

  Tensor() = default;
  Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims) : data(data_), dtype(dtype_) {
    FERRY_ASSERT(dims.size() <= 4);
    for (int64_t d : dims) shape[ndim++] = d;
  }
  static Tensor f32(float* p, std::initializer_list<int64_t> dims) { return Tensor(p, DType::F32, dims); }
  static Tensor f32(const float* p, std::initializer_list<int64_t> dims) {
    return Tensor(const_cast<float*>(p), DType::F32, dims);
  }

  bool empty() const { return data == nullptr; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return ndim == 0 ? 0 : n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // dim(-1) is the last dimension.
  int64_t dim(int i) const {
    if (i < 0) i += ndim;
    FERRY_ASSERT(i >= 0 && i < ndim);
    return shape[i];
  }
  float* f32() const {
    FERRY_ASSERT(dtype == DType::F32, "expected an F32 tensor");
    return static_cast<float*>(data);
  }
  // The same memory seen with other dims (numel must match).
  Tensor view(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, dims);
    FERRY_ASSERT(t.numel() == numel(), "view changes the element count");
    return t;
  }
  std::string shape_string() const;
};

}  // namespace ferry
