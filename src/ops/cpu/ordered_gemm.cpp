#include "ops/cpu/ordered_gemm.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "ops/cpu/vec_math.h"

namespace ferry::cpu {

namespace {

constexpr int64_t kLanes = 8;
// Columns of an accumulator block: 256 floats stay in L1 beside a row of the other operand.
constexpr int64_t kColumnBlock = 256;

// Fixed-lane dot product: lane l sums a[k] * b[k] for k = l, l + 8, ...; the lanes are combined in
// a fixed tree and the tail (K mod 8) is added last, in order.
FERRY_VECTOR_CLONES float dot(const float* a, const float* b, int64_t K) {
  float acc[kLanes] = {};
  const int64_t body = K / kLanes * kLanes;
  for (int64_t k = 0; k < body; k += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[k + l] * b[k + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (int64_t k = body; k < K; ++k) s += a[k] * b[k];
  return s;
}

// out[0..n) += a * row[0..n): one product and one add per element.
FERRY_VECTOR_CLONES void axpy(float a, const float* row, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a * row[i];
}

// Grain of parallel_for in rows (or weight rows) so that a task has ~64K multiply-adds.
size_t grain_for(int64_t work_per_row) {
  return static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, work_per_row)));
}

}  // namespace

void ordered_gemm_xwt(const float* x, const float* w, float* y, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(
      static_cast<size_t>(T),
      [&](size_t t0, size_t t1) {
        for (size_t t = t0; t < t1; ++t)
          for (int64_t n = 0; n < N; ++n)
            y[static_cast<int64_t>(t) * N + n] = dot(x + static_cast<int64_t>(t) * K, w + n * K, K);
      },
      grain_for(N * K));
}

void ordered_gemm_dyw(const float* dy, const float* w, float* dx, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(
      static_cast<size_t>(T),
      [&](size_t t0, size_t t1) {
        float acc[kColumnBlock];
        for (size_t t = t0; t < t1; ++t) {
          const float* g = dy + static_cast<int64_t>(t) * N;
          float* out = dx + static_cast<int64_t>(t) * K;
          for (int64_t k0 = 0; k0 < K; k0 += kColumnBlock) {
            const int64_t nk = std::min(kColumnBlock, K - k0);
            std::fill(acc, acc + nk, 0.0f);
            for (int64_t n = 0; n < N; ++n) axpy(g[n], w + n * K + k0, acc, nk);
            std::copy(acc, acc + nk, out + k0);
          }
        }
      },
      grain_for(N * K));
}

void ordered_gemm_dw(const float* dy, const float* x, float* dw, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(
      static_cast<size_t>(N),
      [&](size_t n0, size_t n1) {
        for (size_t n = n0; n < n1; ++n) {
          float* out = dw + static_cast<int64_t>(n) * K;
          for (int64_t k0 = 0; k0 < K; k0 += kColumnBlock) {
            const int64_t nk = std::min(kColumnBlock, K - k0);
            for (int64_t t = 0; t < T; ++t) axpy(dy[t * N + static_cast<int64_t>(n)], x + t * K + k0, out + k0, nk);
          }
        }
      },
      grain_for(T * K));
}

}  // namespace ferry::cpu
