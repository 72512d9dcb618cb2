// Fused lm_head + cross-entropy: logits = x @ w^T are formed a chunk of tokens at a time, so the
// memory is (chunk, V) instead of (T, V), turned into the loss and, when asked, in place into
// dlogits = grad_scale * (softmax - onehot), which two products carry back to dx and dw. The
// products are ordered_gemm.h's and the loss is added token by token, so the head run over
// sequence tiles gives the uncut head's bits.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/ordered_gemm.h"
#include "ops/cpu/vec_math.h"
#include "ops/cpu/workspace.h"

namespace ferry {

namespace {

// Tokens per chunk: 256, fewer for a large vocabulary so a chunk stays near 32 MiB of logits.
int64_t chunk_tokens(int64_t V) {
  constexpr int64_t kMaxFloats = int64_t{1} << 23;
  return std::clamp<int64_t>(kMaxFloats / std::max<int64_t>(V, 1), 16, 256);
}

// One row of logits (V), in place: returns the row's loss logsumexp - logit[target] and, when
// grad_scale is not null, leaves dlogits = grad_scale * (softmax - onehot) in the row.
FERRY_VECTOR_CLONES double softmax_row(float* row, int64_t V, int32_t target, const float* grad_scale) {
  const float logit = row[target];
  const float m = cpu::max_of(row, V);
  for (int64_t i = 0; i < V; ++i) row[i] -= m;
  cpu::exp_inplace(row, V);
  const double sum = cpu::sum_of(row, V);
  if (grad_scale) {
    const float c = static_cast<float>(static_cast<double>(*grad_scale) / sum);
    for (int64_t i = 0; i < V; ++i) row[i] *= c;
    row[target] -= *grad_scale;
  }
  return (static_cast<double>(m) + std::log(sum)) - static_cast<double>(logit);
}

}  // namespace

// loss_sum (1) += each counted token's loss (computed in double, rounded to fp32), in token order:
// a sum over tokens that does not depend on where the caller cut them.
void CpuOps::linear_cross_entropy(Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx,
                                  Tensor dw, Tensor loss_sum, Tensor logits, int64_t weight_grad_chunks) {
  cpu::expect(weight_grad_chunks >= 1, "linear_cross_entropy",
              fmt::format("weight_grad_chunks is {}, expected at least 1", weight_grad_chunks));
  if (!loss_sum.empty()) cpu::expect_numel("linear_cross_entropy", "loss_sum", loss_sum, 1);
  std::vector<double> row_loss;
  linear_cross_entropy_rows(x, w, targets, grad_scale, dx, dw, logits, row_loss);
  if (loss_sum.empty()) return;
  float sum = loss_sum.f32()[0];
  for (int64_t t = 0; t < static_cast<int64_t>(row_loss.size()); ++t)
    if (targets[t] != kIgnoreIndex) sum += static_cast<float>(row_loss[static_cast<size_t>(t)]);
  loss_sum.f32()[0] = sum;
}

double CpuOps::linear_cross_entropy_sum(Tensor x, Tensor w, const int32_t* targets, float grad_scale,
                                        Tensor dx, Tensor dw, Tensor logits) {
  std::vector<double> row_loss;
  linear_cross_entropy_rows(x, w, targets, grad_scale, dx, dw, logits, row_loss);
  double total = 0.0;  // in token order, whatever the partition
  for (double l : row_loss) total += l;
  return total;
}

// x (T,H), w (V,H), targets (T) -> row_loss (T): logsumexp(logits_t) - logits_t[target] at counted
// tokens, 0 elsewhere. dx (T,H) assigned and dw (V,H) accumulated, each when given; logits (T,V)
// written when given.
void CpuOps::linear_cross_entropy_rows(Tensor x, Tensor w, const int32_t* targets, float grad_scale,
                                       Tensor dx, Tensor dw, Tensor logits, std::vector<double>& row_loss) {
  const char* op = "linear_cross_entropy";
  cpu::expect_f32(op, "w", w);
  cpu::expect(w.ndim == 2, op, fmt::format("w is {}, expected (V, H)", w.shape_string()));
  const int64_t V = w.shape[0], H = w.shape[1];
  const int64_t T = cpu::expect_matrix(op, "x", x, H);
  if (!dx.empty()) cpu::expect_like(op, "dx", dx, "x", x);
  if (!dw.empty()) cpu::expect_like(op, "dw", dw, "w", w);
  if (!logits.empty()) {
    cpu::expect(cpu::expect_matrix(op, "logits", logits, V) == T, op,
                fmt::format("logits is {}, expected ({}, {})", logits.shape_string(), T, V));
  }
  row_loss.assign(static_cast<size_t>(T), 0.0);
  if (T == 0) return;
  cpu::expect(targets != nullptr, op, "targets is null");
  cpu::expect(V > 0, op, fmt::format("w is {}: the vocabulary is empty", w.shape_string()));
  // Targets come from the data: one outside the vocabulary means data and model disagree.
  for (int64_t t = 0; t < T; ++t) {
    if (targets[t] != kIgnoreIndex && (targets[t] < 0 || targets[t] >= V))
      fail("cross_entropy",
           "target {} at position {} is outside the vocabulary [0, {}); tokenize the data with "
           "the model's own tokenizer",
           targets[t], t, V);
  }

  const bool want_grad = !dx.empty() || !dw.empty();
  const float* xs = x.f32();
  const float* ws = w.f32();
  const int64_t C = std::min(T, chunk_tokens(V));
  float* buf = cpu::scratch(cpu::Scratch::kA, static_cast<size_t>(C * V));  // (C,V): logits, then dlogits

  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int64_t n = std::min(C, T - t0);
    const float* xc = xs + t0 * H;
    if (H > 0) {
      cpu::ordered_gemm_xwt(xc, ws, buf, n, V, H);
    } else {
      std::fill(buf, buf + n * V, 0.0f);
    }
    if (!logits.empty()) std::memcpy(logits.f32() + t0 * V, buf, static_cast<size_t>(n * V) * sizeof(float));

    ThreadPool::global().parallel_for(
        n,
        [&](size_t r0, size_t r1) {
          for (size_t r = r0; r < r1; ++r) {
            float* row = buf + r * V;
            const int32_t target = targets[t0 + r];
            if (target == kIgnoreIndex) {
              if (want_grad) std::fill(row, row + V, 0.0f);
              continue;
            }
            row_loss[t0 + r] = softmax_row(row, V, target, want_grad ? &grad_scale : nullptr);
          }
        },
        4);

    if (!want_grad || H == 0) continue;
    // dx (n,H) = dlogits (n,V) @ w (V,H);  dw (V,H) += dlogits^T @ x (n,H).
    if (!dx.empty()) {
      cpu::ordered_gemm_dyw(buf, ws, dx.f32() + t0 * H, n, V, H);
    }
    if (!dw.empty()) {
      cpu::ordered_gemm_dw(buf, xc, dw.f32(), n, V, H);
    }
  }
}

}  // namespace ferry
