// RMSNorm over the last dim, as Hugging Face's LlamaRMSNorm computes it in fp32:
//   rstd = 1 / sqrt(mean(x^2) + eps);  out = (x * rstd) * weight.
// The sum of squares is accumulated in double (then rounded once to float) so that the statistic
// does not depend on the summation order another backend picks.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {

constexpr size_t kRowGrain = 16;

// Returns D (from weight) and R (rows of x) after checking x, weight and rstd.
void check_common(const char* op, const Tensor& x, const Tensor& weight, const Tensor& rstd, int64_t* R,
                  int64_t* D) {
  cpu::expect_f32(op, "weight", weight);
  cpu::expect(weight.ndim == 1, op, fmt::format("weight is {}, expected (D)", weight.shape_string()));
  *D = weight.shape[0];
  *R = cpu::expect_matrix(op, "x", x, *D);
  cpu::expect_numel(op, "rstd", rstd, *R);
}

}  // namespace

// x (R,D), weight (D) -> out (R,D), rstd (R).
void CpuOps::rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) {
  const char* op = "rmsnorm_forward";
  int64_t R, D;
  check_common(op, x, weight, rstd, &R, &D);
  cpu::expect_like(op, "out", out, "x", x);
  if (R == 0 || D == 0) return;
  const float* xs = x.f32();
  const float* w = weight.f32();
  float* ys = out.f32();
  float* rs = rstd.f32();
  ThreadPool::global().parallel_for(
      R,
      [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
          const float* xr = xs + r * D;
          float* yr = ys + r * D;
          double sum = 0.0;
          for (int64_t i = 0; i < D; ++i) sum += static_cast<double>(xr[i]) * xr[i];
          const float mean = static_cast<float>(sum / static_cast<double>(D));
          const float s = 1.0f / std::sqrt(mean + eps);
          rs[r] = s;
          for (int64_t i = 0; i < D; ++i) yr[i] = (xr[i] * s) * w[i];
        }
      },
      kRowGrain);
}

// With g = dout, w = weight, s = rstd of the row:
//   dx = dresidual + (s * (w * g) - x * s^3 * mean(x * w * g))    (R,D), assigned
//   dweight += sum over rows of g * x * s                         (D), accumulated
// dresidual (optional, may be dx) is added to each element once it is rounded, as add() would.
// dx is split over rows; dweight over columns, each column summed over the rows in row order by
// one thread, so dweight does not depend on the thread count.
void CpuOps::rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual, Tensor dx,
                              Tensor dweight) {
  const char* op = "rmsnorm_backward";
  int64_t R, D;
  check_common(op, x, weight, rstd, &R, &D);
  cpu::expect_like(op, "dout", dout, "x", x);
  if (!dx.empty()) cpu::expect_like(op, "dx", dx, "x", x);
  if (!dresidual.empty()) {
    cpu::expect(!dx.empty(), op, "dresidual is given without dx");
    cpu::expect_numel(op, "dresidual", dresidual, dx.numel());
    cpu::expect_same_or_disjoint(op, "dresidual", dresidual, "dx", dx);
  }
  if (!dweight.empty()) cpu::expect_like(op, "dweight", dweight, "weight", weight);
  if (R == 0 || D == 0) return;
  const float* xs = x.f32();
  const float* w = weight.f32();
  const float* rs = rstd.f32();
  const float* gs = dout.f32();
  ThreadPool& pool = ThreadPool::global();

  if (!dx.empty()) {
    float* dxs = dx.f32();
    const float* res = dresidual.empty() ? nullptr : dresidual.f32();
    pool.parallel_for(
        R,
        [&](size_t r0, size_t r1) {
          for (size_t r = r0; r < r1; ++r) {
            const float* xr = xs + r * D;
            const float* gr = gs + r * D;
            float* dr = dxs + r * D;
            double dot = 0.0;  // sum of x * w * g over the row
            for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(xr[i] * w[i] * gr[i]);
            const float s = rs[r];
            const float c = static_cast<float>(dot / static_cast<double>(D)) * s * s * s;
            if (res == nullptr) {
              for (int64_t i = 0; i < D; ++i) dr[i] = s * (w[i] * gr[i]) - xr[i] * c;
            } else {
              const float* rr = res + r * D;
              for (int64_t i = 0; i < D; ++i) dr[i] = rr[i] + (s * (w[i] * gr[i]) - xr[i] * c);
            }
          }
        },
        kRowGrain);
  }

  if (!dweight.empty()) {
    float* dw = dweight.f32();
    pool.parallel_for(
        D,
        [&](size_t c0, size_t c1) {
          // Sums are kept in a small stack block of columns so that the inner loop over a row
          // segment vectorises while every column still adds its rows in order, onto the value
          // it holds: two calls over rows A then B give one call's bits over [A; B]
          // (ops/cpu/ordered_gemm.h says why that matters).
          constexpr size_t kBlock = 256;
          float acc[kBlock];
          for (size_t b0 = c0; b0 < c1; b0 += kBlock) {
            const size_t n = std::min(kBlock, c1 - b0);
            for (size_t i = 0; i < n; ++i) acc[i] = dw[b0 + i];
            for (int64_t r = 0; r < R; ++r) {
              const float* xr = xs + r * D + b0;
              const float* gr = gs + r * D + b0;
              const float s = rs[r];
              for (size_t i = 0; i < n; ++i) acc[i] += gr[i] * (xr[i] * s);
            }
            for (size_t i = 0; i < n; ++i) dw[b0 + i] = acc[i];
          }
        },
        16);
  }
}

}  // namespace ferry
