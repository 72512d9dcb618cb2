// Linear layer y = x @ w^T + bias and its backward, through the ordered products of
// ops/cpu/ordered_gemm.h: rows independent of one another and weight gradients added token after
// token, so a layer cut into sequence tiles gives the uncut layer's bits.
//
// The residual of the forward and the accumulated dx of the backward are added after the product
// with CpuOps::add, so the result equals the product followed by add() exactly (ops.h).
#include <algorithm>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/ordered_gemm.h"
#include "ops/cpu/workspace.h"

namespace ferry {

namespace {

// Returns T after checking x (T,in) and w (out,in); sets in_features and out_features.
int64_t check_xw(const char* op, const Tensor& x, const Tensor& w, int64_t* in_features,
                 int64_t* out_features) {
  cpu::expect_f32(op, "w", w);
  cpu::expect(w.ndim == 2, op, fmt::format("w is {}, expected (out, in)", w.shape_string()));
  *out_features = w.shape[0];
  *in_features = w.shape[1];
  return cpu::expect_matrix(op, "x", x, *in_features);
}

}  // namespace

// y (T,out) = residual (T,out) + (x (T,in) @ w (out,in)^T + bias (out)). The product goes to y,
// or to scratch when the residual is y itself, and is then added to the residual.
void CpuOps::linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) {
  const char* op = "linear_forward";
  int64_t in, out;
  const int64_t T = check_xw(op, x, w, &in, &out);
  cpu::expect(
      cpu::expect_matrix(op, "y", y, out) == T, op,
      fmt::format("y is {} but x is {}; they must have the same rows", y.shape_string(), x.shape_string()));
  if (!bias.empty()) cpu::expect_shape(op, "bias", bias, {out});
  if (!residual.empty()) {
    cpu::expect_numel(op, "residual", residual, y.numel());
    cpu::expect_same_or_disjoint(op, "residual", residual, "y", y);
  }
  if (T == 0 || out == 0) return;
  const bool in_place = !residual.empty() && residual.data == y.data;
  float* ys = in_place ? cpu::scratch(cpu::Scratch::kA, static_cast<size_t>(T * out)) : y.f32();
  if (in == 0) {
    std::fill(ys, ys + T * out, 0.0f);
  } else {
    cpu::ordered_gemm_xwt(x.f32(), w.f32(), ys, T, out, in);
  }
  if (!bias.empty()) {
    const float* b = bias.f32();
    ThreadPool::global().parallel_for(
        T,
        [&](size_t t0, size_t t1) {
          for (size_t t = t0; t < t1; ++t)
            for (int64_t o = 0; o < out; ++o) ys[t * out + o] += b[o];
        },
        std::max<size_t>(1, (1 << 14) / std::max<int64_t>(1, out)));
  }
  if (!residual.empty()) add(residual, Tensor::f32(ys, {T, out}), y);
}

// dx (T,in) = dy (T,out) @ w (assigned, or added to dx through scratch when accumulate_dx; skipped
// when dx is empty); dw (out,in) += dy^T @ x (skipped when empty); dbias (out) += column sums of dy
// (when given).
void CpuOps::linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                             bool accumulate_dx) {
  const char* op = "linear_backward";
  int64_t in, out;
  const int64_t T = check_xw(op, x, w, &in, &out);
  cpu::expect(
      cpu::expect_matrix(op, "dy", dy, out) == T, op,
      fmt::format("dy is {} but x is {}; they must have the same rows", dy.shape_string(), x.shape_string()));
  if (!dx.empty()) cpu::expect_like(op, "dx", dx, "x", x);
  if (!dw.empty()) cpu::expect_like(op, "dw", dw, "w", w);
  if (!dbias.empty()) cpu::expect_shape(op, "dbias", dbias, {out});
  if (T == 0) return;

  if (!dx.empty() && in > 0) {
    float* product = accumulate_dx ? cpu::scratch(cpu::Scratch::kA, static_cast<size_t>(T * in)) : dx.f32();
    if (out == 0) {
      std::fill(product, product + T * in, 0.0f);
    } else {
      cpu::ordered_gemm_dyw(dy.f32(), w.f32(), product, T, out, in);
    }
    if (accumulate_dx) add(dx, Tensor::f32(product, {T, in}), dx);
  }
  if (!dw.empty() && in > 0 && out > 0) {
    cpu::ordered_gemm_dw(dy.f32(), x.f32(), dw.f32(), T, out, in);
  }
  if (!dbias.empty() && out > 0) {
    // Each column adds the rows in row order onto its value, by one thread: independent of the
    // thread count and of how the caller cut the rows (ordered_gemm.h).
    const float* g = dy.f32();
    float* db = dbias.f32();
    ThreadPool::global().parallel_for(
        out,
        [&](size_t c0, size_t c1) {
          constexpr size_t kBlock = 256;
          float acc[kBlock];
          for (size_t b0 = c0; b0 < c1; b0 += kBlock) {
            const size_t n = std::min(kBlock, c1 - b0);
            for (size_t i = 0; i < n; ++i) acc[i] = db[b0 + i];
            for (int64_t t = 0; t < T; ++t) {
              const float* gr = g + t * out + b0;
              for (size_t i = 0; i < n; ++i) acc[i] += gr[i];
            }
            for (size_t i = 0; i < n; ++i) db[b0 + i] = acc[i];
          }
        },
        16);
  }
}

}  // namespace ferry
