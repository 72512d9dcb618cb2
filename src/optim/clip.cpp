#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/thread_pool.h"

namespace ferry {

namespace {

// Chunk size of the deterministic reduction. Fixed, so the order of additions is a property of the
// data alone.
constexpr size_t kChunk = kGradNormChunk;

struct Chunk {
  const void* data;
  size_t count;
  bool bf16;
};

inline double widen(float x) {
  return x;
}
inline double widen(uint16_t x) {
  return bf16_to_f32(x);
}

template <typename T>
double sum_squares(const T* x, size_t n) {
  // The order inside a chunk: element i goes to accumulator i % 128, rows of 128 in
  // order; then each 4 neighbouring accumulators pair up, and the 32 results fold in halves (16,
  // 8, 4, 2, 1 apart). A warp computes exactly this with one 4-wide load per lane per row and a
  // shuffle butterfly, so the GPU reads the chunk coalesced; here the 128 columns vectorise.
  constexpr size_t kColumns = kGradNormColumns;
  double acc[kColumns] = {};
  size_t i = 0;
  for (; i + kColumns <= n; i += kColumns)
    for (size_t k = 0; k < kColumns; ++k) {
      const double v = widen(x[i + k]);
      acc[k] += v * v;
    }
  for (size_t k = 0; i + k < n; ++k) {
    const double v = widen(x[i + k]);
    acc[k] += v * v;
  }
  double lane[kColumns / 4];
  for (size_t j = 0; j < kColumns / 4; ++j)
    lane[j] = (acc[4 * j] + acc[4 * j + 1]) + (acc[4 * j + 2] + acc[4 * j + 3]);
  for (size_t half = kColumns / 8; half > 0; half /= 2)
    for (size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
  return lane[0];
}

}  // namespace

std::vector<double> grad_sumsq_partials(std::span<const GradSpan> grads) {
  std::vector<Chunk> chunks;
  for (const GradSpan& g : grads) {
    FERRY_ASSERT(g.dtype == DType::F32 || g.dtype == DType::BF16, "gradients are F32 or BF16");
    const size_t size = dtype_size(g.dtype);
    for (size_t offset = 0; offset < g.count; offset += kChunk)
      chunks.push_back({static_cast<const char*>(g.data) + offset * size, std::min(kChunk, g.count - offset),
                        g.dtype == DType::BF16});
  }
  std::vector<double> partial(chunks.size(), 0.0);
  ThreadPool::global().parallel_for(chunks.size(), [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; ++c) {
      const Chunk& k = chunks[c];
      partial[c] = k.bf16 ? sum_squares(static_cast<const uint16_t*>(k.data), k.count)
                          : sum_squares(static_cast<const float*>(k.data), k.count);
    }
  });
  return partial;
}

std::vector<double> grad_sumsq_partials(const std::vector<std::pair<const float*, size_t>>& grads) {
  std::vector<GradSpan> spans;
  for (const auto& [data, count] : grads) spans.push_back({data, count, DType::F32});
  return grad_sumsq_partials(std::span<const GradSpan>(spans));
}

double norm_from_partials(const std::vector<double>& partials) {
  double total = 0.0;
  for (double p : partials) total += p;
  return std::sqrt(total);
}

double global_grad_norm(const std::vector<std::pair<const float*, size_t>>& grads) {
  return norm_from_partials(grad_sumsq_partials(grads));
}

float clip_coefficient(double total_norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0f;
  // torch: clip_coef = max_norm / (total_norm + 1e-6), where total_norm is an fp32 tensor; Python's
  // `float / tensor` is tensor.reciprocal() * float, so the division is a reciprocal then a multiply.
  const float norm = static_cast<float>(total_norm);
  const float shifted = norm + static_cast<float>(1e-6);
  const float coef = (1.0f / shifted) * static_cast<float>(max_norm);
  // clamp(max=1.0) propagates NaN; std::min(coef, 1) returns coef when it is NaN.
  return std::min(coef, 1.0f);
}

}  // namespace ferry
