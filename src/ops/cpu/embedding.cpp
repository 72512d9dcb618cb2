// Token embedding: a gather of table rows, and its backward, a scatter-add into the table.
#include <cstring>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {

// Token ids come from the data pipeline: an id outside the vocabulary means the data was
// tokenized for another model, which is the user's mistake, not ours.
void check_ids(const int32_t* ids, int64_t T, int64_t V) {
  for (int64_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= V)
      fail("embedding",
           "token id {} at position {} is outside the vocabulary [0, {}); tokenize the data with "
           "the model's own tokenizer",
           ids[t], t, V);
  }
}

}  // namespace

// out (T,H) = table (V,H) [ids (T)].
void CpuOps::embedding_forward(const int32_t* ids, Tensor table, Tensor out) {
  const char* op = "embedding_forward";
  cpu::expect_f32(op, "table", table);
  cpu::expect(table.ndim == 2, op, fmt::format("table is {}, expected (V, H)", table.shape_string()));
  const int64_t V = table.shape[0], H = table.shape[1];
  const int64_t T = cpu::expect_matrix(op, "out", out, H);
  if (T == 0) return;
  cpu::expect(ids != nullptr, op, "ids is null");
  check_ids(ids, T, V);
  const float* src = table.f32();
  float* dst = out.f32();
  ThreadPool::global().parallel_for(
      T,
      [&](size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t)
          std::memcpy(dst + t * H, src + static_cast<int64_t>(ids[t]) * H, H * sizeof(float));
      },
      64);
}

// dtable (V,H) += scatter of dout (T,H) by ids (T).
//
// Threads split the hidden dim, never the tokens: each column slice of every table row is owned by
// one thread, which walks the tokens in order, so rows whose id repeats are summed in token order
// whatever the thread count.
void CpuOps::embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) {
  const char* op = "embedding_backward";
  cpu::expect_f32(op, "dtable", dtable);
  cpu::expect(dtable.ndim == 2, op, fmt::format("dtable is {}, expected (V, H)", dtable.shape_string()));
  const int64_t V = dtable.shape[0], H = dtable.shape[1];
  const int64_t T = cpu::expect_matrix(op, "dout", dout, H);
  if (T == 0 || H == 0) return;
  cpu::expect(ids != nullptr, op, "ids is null");
  check_ids(ids, T, V);
  const float* g = dout.f32();
  float* d = dtable.f32();
  ThreadPool::global().parallel_for(
      H,
      [&](size_t c0, size_t c1) {
        for (int64_t t = 0; t < T; ++t) {
          const float* src = g + t * H;
          float* dst = d + static_cast<int64_t>(ids[t]) * H;
          for (size_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
      },
      16);
}

}  // namespace ferry
