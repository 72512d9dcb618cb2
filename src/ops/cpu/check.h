// Shape and dtype invariants of the CPU ops. A failure is a bug in the caller inside ferry (the
// model code built the wrong views), so it aborts like FERRY_ASSERT, but with a message that names
// the op, the tensor and the shapes involved.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <source_location>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace ferry::cpu {

// Aborts with "op: message" when `ok` is false.
inline void expect(bool ok, const char* op, const std::string& message,
                   std::source_location where = std::source_location::current()) {
  if (!ok)
    assertion_failed("shape/dtype check", where.file_name(), static_cast<int>(where.line()),
                     fmt::format("{}: {}", op, message));
}

// A present fp32 tensor.
inline void expect_f32(const char* op, const char* name, const Tensor& t,
                       std::source_location where = std::source_location::current()) {
  expect(!t.empty(), op, fmt::format("{} is missing", name), where);
  expect(t.dtype == DType::F32, op,
         fmt::format("{} {} has dtype {}; the CPU backend computes in F32 only", name, t.shape_string(),
                     dtype_name(t.dtype)),
         where);
}

// A present fp32 tensor with exactly these dims.
inline void expect_shape(const char* op, const char* name, const Tensor& t,
                         std::initializer_list<int64_t> dims,
                         std::source_location where = std::source_location::current()) {
  expect_f32(op, name, t, where);
  Tensor want(nullptr, DType::F32, dims);
  bool same = t.ndim == want.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == want.shape[i];
  expect(same, op, fmt::format("{} is {}, expected {}", name, t.shape_string(), want.shape_string()), where);
}

// A present fp32 tensor seen as a matrix (rows, cols): its last dim is `cols`, the leading dims
// are flattened into rows. Returns rows.
inline int64_t expect_matrix(const char* op, const char* name, const Tensor& t, int64_t cols,
                             std::source_location where = std::source_location::current()) {
  expect_f32(op, name, t, where);
  expect(t.ndim >= 1 && t.dim(-1) == cols, op,
         fmt::format("{} is {}, expected a last dim of {}", name, t.shape_string(), cols), where);
  return cols == 0 ? 0 : t.numel() / cols;
}

// A present fp32 tensor of `count` elements, whatever its dims.
inline void expect_numel(const char* op, const char* name, const Tensor& t, int64_t count,
                         std::source_location where = std::source_location::current()) {
  expect_f32(op, name, t, where);
  expect(
      t.numel() == count, op,
      fmt::format("{} is {} ({} elements), expected {} elements", name, t.shape_string(), t.numel(), count),
      where);
}

// A present fp32 tensor with the same dims as `ref`.
inline void expect_like(const char* op, const char* name, const Tensor& t, const char* ref_name,
                        const Tensor& ref, std::source_location where = std::source_location::current()) {
  expect_f32(op, name, t, where);
  bool same = t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == ref.shape[i];
  expect(same, op,
         fmt::format("{} is {} but {} is {}; they must match", name, t.shape_string(), ref_name,
                     ref.shape_string()),
         where);
}

// The addend of a fused add (ops.h) is either the output itself, each element read before it is
// written, or disjoint from it: a partial overlap would be read after it was written.
inline void expect_same_or_disjoint(const char* op, const char* name, const Tensor& addend,
                                    const char* out_name, const Tensor& out,
                                    std::source_location where = std::source_location::current()) {
  const auto* a = static_cast<const unsigned char*>(addend.data);
  const auto* o = static_cast<const unsigned char*>(out.data);
  expect(a == o || a + addend.bytes() <= o || o + out.bytes() <= a, op,
         fmt::format("{} {} overlaps {} {} without being it", name, addend.shape_string(), out_name,
                     out.shape_string()),
         where);
}

}  // namespace ferry::cpu
