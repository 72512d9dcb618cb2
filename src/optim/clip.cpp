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

inline double widen(float x) { return x; }
inline double widen(uint16_t x) { return bf16_to_f32(x); }

template <typename T>
double sum_squares(const T* x, size_t n) {
  // Four accumulators break the add dependency chain; their combination order is fixed.
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double x0 = widen(x[i]), x1 = widen(x[i + 1]), x2 = widen(x[i + 2]), x3 = widen(x[i + 3]);
    a0 += x0 * x0;
    a1 += x1 * x1;
    a2 += x2 * x2;
    a3 += x3 * x3;
  }
  for (; i < n; ++i) {
    const double xi = widen(x[i]);
    a0 += xi * xi;
  }
  return (a0 + a1) + (a2 + a3);
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
