#include "ops/cpu/ordered_gemm.h"

#include <algorithm>
#include <vector>

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

// Four dot products of a with b[0..3] at once: each is dot(a, b[j], K) bit for bit (the same lanes
// and the same tree), run side by side so that four add chains overlap instead of one.
FERRY_VECTOR_CLONES void dot4(const float* a, const float* const b[4], int64_t K, float out[4]) {
  float acc[4][kLanes] = {};
  const int64_t body = K / kLanes * kLanes;
  for (int64_t k = 0; k < body; k += kLanes)
    for (int j = 0; j < 4; ++j)
      for (int64_t l = 0; l < kLanes; ++l) acc[j][l] += a[k + l] * b[j][k + l];
  for (int j = 0; j < 4; ++j) {
    const float* c = acc[j];
    float s = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
    for (int64_t k = body; k < K; ++k) s += a[k] * b[j][k];
    out[j] = s;
  }
}

// out[0..n) += a * row[0..n): one product and one add per element.
FERRY_VECTOR_CLONES void axpy(float a, const float* row, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += a * row[i];
}

// Four axpys in turn (a[0] with row[0] first), each element's adds in that order: the bits of four
// axpy calls, with out read and written once instead of four times.
FERRY_VECTOR_CLONES void axpy4(const float a[4], const float* const row[4], float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = (((out[i] + a[0] * row[0][i]) + a[1] * row[1][i]) + a[2] * row[2][i]) + a[3] * row[3][i];
}

// Rows of a block: a block of one operand is reused from L1/L2 against each row of the other
// streamed once, instead of every row of the other being read again per row (a layer's weights,
// megabytes, read once per token). Blocking changes no sum's order, so no bit.
constexpr int64_t kRowBlock = 16;

size_t blocks(int64_t n) {
  return static_cast<size_t>((n + kRowBlock - 1) / kRowBlock);
}

}  // namespace

void ordered_gemm_xwt(const float* x, const float* w, float* y, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(blocks(T), [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b) {
      const int64_t t0 = static_cast<int64_t>(b) * kRowBlock, t1 = std::min(T, t0 + kRowBlock);
      int64_t n = 0;
      for (; n + 4 <= N; n += 4) {
        const float* const rows[4] = {w + n * K, w + (n + 1) * K, w + (n + 2) * K, w + (n + 3) * K};
        for (int64_t t = t0; t < t1; ++t) {
          float out[4];
          dot4(x + t * K, rows, K, out);
          for (int j = 0; j < 4; ++j) y[t * N + n + j] = out[j];
        }
      }
      for (; n < N; ++n)
        for (int64_t t = t0; t < t1; ++t) y[t * N + n] = dot(x + t * K, w + n * K, K);
    }
  });
}

void ordered_gemm_dyw(const float* dy, const float* w, float* dx, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(blocks(T), [&](size_t b0, size_t b1) {
    std::vector<float> acc(static_cast<size_t>(kRowBlock * kColumnBlock));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t t0 = static_cast<int64_t>(b) * kRowBlock, t1 = std::min(T, t0 + kRowBlock);
      for (int64_t k0 = 0; k0 < K; k0 += kColumnBlock) {
        const int64_t nk = std::min(kColumnBlock, K - k0);
        std::fill(acc.begin(), acc.end(), 0.0f);
        int64_t n = 0;
        for (; n + 4 <= N; n += 4) {
          const float* const rows[4] = {w + n * K + k0, w + (n + 1) * K + k0, w + (n + 2) * K + k0,
                                        w + (n + 3) * K + k0};
          for (int64_t t = t0; t < t1; ++t) {
            const float a[4] = {dy[t * N + n], dy[t * N + n + 1], dy[t * N + n + 2], dy[t * N + n + 3]};
            axpy4(a, rows, acc.data() + (t - t0) * kColumnBlock, nk);
          }
        }
        for (; n < N; ++n)
          for (int64_t t = t0; t < t1; ++t)
            axpy(dy[t * N + n], w + n * K + k0, acc.data() + (t - t0) * kColumnBlock, nk);
        for (int64_t t = t0; t < t1; ++t)
          std::copy(acc.data() + (t - t0) * kColumnBlock, acc.data() + (t - t0) * kColumnBlock + nk,
                    dx + t * K + k0);
      }
    }
  });
}

void ordered_gemm_dw(const float* dy, const float* x, float* dw, int64_t T, int64_t N, int64_t K) {
  ThreadPool::global().parallel_for(blocks(N), [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b) {
      const int64_t n0 = static_cast<int64_t>(b) * kRowBlock, n1 = std::min(N, n0 + kRowBlock);
      for (int64_t k0 = 0; k0 < K; k0 += kColumnBlock) {
        const int64_t nk = std::min(kColumnBlock, K - k0);
        int64_t t = 0;
        for (; t + 4 <= T; t += 4) {
          const float* const rows[4] = {x + t * K + k0, x + (t + 1) * K + k0, x + (t + 2) * K + k0,
                                        x + (t + 3) * K + k0};
          for (int64_t n = n0; n < n1; ++n) {
            const float a[4] = {dy[t * N + n], dy[(t + 1) * N + n], dy[(t + 2) * N + n], dy[(t + 3) * N + n]};
            axpy4(a, rows, dw + n * K + k0, nk);
          }
        }
        for (; t < T; ++t)
          for (int64_t n = n0; n < n1; ++n) axpy(dy[t * N + n], x + t * K + k0, dw + n * K + k0, nk);
      }
    }
  });
}

}  // namespace ferry::cpu
