// Causal self-attention with grouped query heads and document masking, computed exactly (no
// online softmax): query t of head h sees keys j with doc_start[t] <= j <= t of kv head
// h / (Hq / Hkv). O(T^2 D) per head, which is what an oracle should be; the demo model's T and D
// are small enough for it to train at a useful speed on two cores.
//
// Parallel split: every output row (of out, dq, dk or dv) is computed start to finish by one
// thread, in a fixed order, so the results are bit-identical run to run and for any thread count.
// Rows are dealt to threads cyclically because causal rows differ in length.
//
// Speed without giving that up: a score q.k is summed over d in plain order d = 0..D-1, but many
// scores at once -- the inner loops run across keys (or queries) over transposed copies (D, T)
// of k, v, q and dout, and the weighted sums of rows across the D columns, so they vectorise with
// no reassociation, at any vector width, with the same bits. Every place that needs a score or
// dout.v recomputes it with the same products in the same order, so the dq and the dk/dv passes
// agree on P and dS to the bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/vec_math.h"
#include "ops/cpu/workspace.h"

namespace ferry {

namespace {

struct Dims {
  int64_t T, Hq, Hkv, D, group;  // group = query heads per kv head
  int64_t Ho;                    // heads per row of out and dout (>= Hq: ops.h)
};

// Calls body(item, scratch) for item in [0, count), items dealt round-robin to the pool's threads.
// `scratch` is a per-thread buffer of `scratch_floats` floats.
template <typename Body>
void for_rows_cyclic(int64_t count, size_t scratch_floats, const Body& body) {
  if (count <= 0) return;
  ThreadPool::global().run_on_all([&](size_t piece, size_t pieces) {
    float* scratch = cpu::scratch(cpu::Scratch::kRow, scratch_floats);
    for (int64_t i = static_cast<int64_t>(piece); i < count; i += static_cast<int64_t>(pieces))
      body(i, scratch);
  });
}

// (T, heads, D) -> (heads, D, ld): a head's d-th components of all tokens contiguous. ld is T
// padded so that rows are not a multiple of 4 KiB apart (which would map them all to the same L1
// sets); the padding is never read.
int64_t padded_ld(int64_t T) {
  return (T + 15) / 16 * 16 + 16;
}

// x's rows are `row` floats apart (heads * D, or more for a group's heads of a wider tensor).
const float* transpose_heads(cpu::Scratch slot, const float* x, int64_t T, int64_t heads, int64_t D,
                             int64_t ld, int64_t row) {
  float* out = cpu::scratch(slot, static_cast<size_t>(heads * D * ld));
  ThreadPool::global().parallel_for(
      heads * D,
      [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
          const int64_t h = r / D, d = r % D;
          float* dst = out + r * ld;
          for (int64_t t = 0; t < T; ++t) dst[t] = x[t * row + h * D + d];
        }
      },
      4);
  return out;
}

// (T, heads, D) -> (heads, T, D): a head's rows contiguous, read in streams by the weighted sums.
const float* head_major(cpu::Scratch slot, const float* x, int64_t T, int64_t heads, int64_t D, int64_t row) {
  float* out = cpu::scratch(slot, static_cast<size_t>(heads * T * D));
  ThreadPool::global().parallel_for(
      heads * T,
      [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
          const int64_t h = r / T, t = r % T;
          std::copy(x + t * row + h * D, x + t * row + (h + 1) * D, out + r * D);
        }
      },
      16);
  return out;
}

// The two products of attention, each output element summed over its reduction index in plain
// order, W outputs at a time in registers (W = 32, then 8, then 1 for the tails): the width only
// changes speed, never bits.

// s[i] = sum over d < D, in order, of a[d] * xt[d * ld + i], for i < W.
template <int W>
inline void dots_block(const float* a, const float* xt, int64_t ld, int64_t D, float* s) {
  float acc[W] = {};
  for (int64_t d = 0; d < D; ++d) {
    const float ad = a[d];
    const float* x = xt + d * ld;
    for (int k = 0; k < W; ++k) acc[k] += ad * x[k];
  }
  for (int k = 0; k < W; ++k) s[k] = acc[k];
}

// s (n) = dot products of a (D) with the n columns of xt (D rows of stride ld).
inline void dots_across(const float* a, const float* xt, int64_t ld, int64_t D, float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) dots_block<32>(a, xt + i, ld, D, s + i);
  for (; i + 8 <= n; i += 8) dots_block<8>(a, xt + i, ld, D, s + i);
  for (; i < n; ++i) dots_block<1>(a, xt + i, ld, D, s + i);
}

// y[c] += sum over i < n, in order, of w[i] * x[i * stride + c], for c < W.
template <int W>
inline void combine_block(const float* w, const float* x, int64_t stride, int64_t n, float* y) {
  float acc[W];
  for (int k = 0; k < W; ++k) acc[k] = y[k];
  for (int64_t i = 0; i < n; ++i) {
    const float wi = w[i];
    const float* xr = x + i * stride;
    for (int k = 0; k < W; ++k) acc[k] += wi * xr[k];
  }
  for (int k = 0; k < W; ++k) y[k] = acc[k];
}

// y (D) += w-weighted sum of the n rows of x (rows of stride `stride`).
inline void combine_rows(const float* w, const float* x, int64_t stride, int64_t n, float* y, int64_t D) {
  int64_t c = 0;
  for (; c + 32 <= D; c += 32) combine_block<32>(w, x + c, stride, n, y + c);
  for (; c + 8 <= D; c += 8) combine_block<8>(w, x + c, stride, n, y + c);
  for (; c < D; ++c) combine_block<1>(w, x + c, stride, n, y + c);
}

// One output row of the forward: query q (D) against n keys whose transposed components start at
// kt (D rows of stride ld), values v (n rows of stride vstride). s: scratch (n). Writes out (D)
// and returns lse.
FERRY_VECTOR_CLONES float forward_row(const float* q, const float* kt, int64_t ld, const float* v,
                                      int64_t vstride, int64_t D, int64_t n, float scale, float* s,
                                      float* out) {
  dots_across(q, kt, ld, D, s, n);
  for (int64_t i = 0; i < n; ++i) s[i] *= scale;
  const float m = cpu::max_of(s, n);
  for (int64_t i = 0; i < n; ++i) s[i] -= m;
  cpu::exp_inplace(s, n);
  const double l = cpu::sum_of(s, n);
  std::fill(out, out + D, 0.0f);
  combine_rows(s, v, vstride, n, out, D);
  const float inv = static_cast<float>(1.0 / l);
  for (int64_t i = 0; i < D; ++i) out[i] *= inv;
  return m + static_cast<float>(std::log(l));
}

// P and dS of one query row against n keys, in place: s (n) = P, dp (n) = dS on return.
// q, g: the query and its dout (D); kt, vt: transposed keys and values from the first key.
inline void probs_and_dscores(const float* q, const float* g, const float* kt, const float* vt, int64_t ld,
                              int64_t D, int64_t n, float scale, float lse, float delta, float* s,
                              float* dp) {
  dots_across(q, kt, ld, D, s, n);
  dots_across(g, vt, ld, D, dp, n);
  for (int64_t i = 0; i < n; ++i) s[i] = scale * s[i] - lse;
  cpu::exp_inplace(s, n);
  for (int64_t i = 0; i < n; ++i) dp[i] = s[i] * (dp[i] - delta);
}

// The dq row of one query: dq (D) = scale * sum_i dS_i k_i over its n keys (rows of stride kstride).
FERRY_VECTOR_CLONES void dq_row(const float* q, const float* g, const float* kt, const float* vt, int64_t ld,
                                const float* k, int64_t kstride, int64_t D, int64_t n, float scale, float lse,
                                float delta, float* s, float* dp, float* dq) {
  probs_and_dscores(q, g, kt, vt, ld, D, n, scale, lse, delta, s, dp);
  std::fill(dq, dq + D, 0.0f);
  combine_rows(dp, k, kstride, n, dq, D);
  for (int64_t i = 0; i < D; ++i) dq[i] *= scale;
}

// One query head's share of the dk and dv rows of key (k, v): over its n queries t (q and dout
// rows of stride qstride; transposed copies qt, gt of stride ld; lse and delta per query),
// kacc (D) += sum_t dS_t q_t and vacc (D) += sum_t P_t dout_t. P and dS are recomputed with the
// very products and order of dq_row, so both passes see the same bits.
FERRY_VECTOR_CLONES void dkdv_head(const float* k, const float* v, const float* qt, const float* gt,
                                   int64_t ld, const float* q, const float* g, int64_t qstride,
                                   const float* lse, const float* delta, int64_t D, int64_t n, float scale,
                                   float* s, float* dp, float* kacc, float* vacc) {
  dots_across(k, qt, ld, D, s, n);
  dots_across(v, gt, ld, D, dp, n);
  for (int64_t i = 0; i < n; ++i) s[i] = scale * s[i] - lse[i];
  cpu::exp_inplace(s, n);
  for (int64_t i = 0; i < n; ++i) dp[i] = s[i] * (dp[i] - delta[i]);
  combine_rows(s, g, qstride, n, vacc, D);
  combine_rows(dp, q, qstride, n, kacc, D);
}

// doc_start must describe contiguous documents: each token starts a document (doc_start[t] == t)
// or continues the previous token's (doc_start[t] == doc_start[t-1]).
void check_doc_start(const char* op, const int32_t* doc_start, int64_t T) {
  cpu::expect(doc_start != nullptr || T == 0, op, "doc_start is null");
  for (int64_t t = 0; t < T; ++t) {
    const bool ok = doc_start[t] == t || (t > 0 && doc_start[t] == doc_start[t - 1]);
    cpu::expect(ok, op,
                fmt::format("doc_start[{}] = {} (previous {}): a token must start a document or continue the "
                            "previous token's",
                            t, doc_start[t], t > 0 ? doc_start[t - 1] : -1));
  }
}

Dims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const int32_t* doc_start,
               const Tensor& out, const Tensor& lse) {
  cpu::expect_f32(op, "q", q);
  cpu::expect_f32(op, "k", k);
  cpu::expect(q.ndim == 3 && k.ndim == 3, op,
              fmt::format("q is {} and k is {}, expected (T, Hq, D) and (T, Hkv, D)", q.shape_string(),
                          k.shape_string()));
  Dims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], 0, 0};
  cpu::expect(k.shape[0] == d.T && k.shape[2] == d.D && d.Hkv > 0 && d.Hq % d.Hkv == 0, op,
              fmt::format("q is {} and k is {}: need the same T and D, and Hq a multiple of Hkv",
                          q.shape_string(), k.shape_string()));
  d.group = d.Hq / d.Hkv;
  cpu::expect_like(op, "v", v, "k", k);
  cpu::expect_f32(op, "out", out);
  cpu::expect(out.ndim == 3 && out.shape[0] == d.T && out.shape[1] >= d.Hq && out.shape[2] == d.D, op,
              fmt::format("out is {} and q is {}: need (T, Ho, D) with Ho >= Hq (a wider out is a group of "
                          "heads' columns of a layer's output, ops.h)",
                          out.shape_string(), q.shape_string()));
  d.Ho = out.shape[1];
  cpu::expect_shape(op, "lse", lse, {d.Hq, d.T});
  check_doc_start(op, doc_start, d.T);
  return d;
}

}  // namespace

// q (T,Hq,D), k v (T,Hkv,D) -> out (T,Ho,D) (its first Hq heads of each row), lse (Hq,T).
void CpuOps::attention_forward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                               Tensor lse) {
  const char* op = "attention_forward";
  const int32_t* doc_start = mask.doc_start;  // the exact mask; row_tokens is only a hint
  const Dims d = check_qkv(op, q, k, v, doc_start, out, lse);
  const int64_t T = d.T, D = d.D;
  if (T == 0 || d.Hq == 0 || D == 0) return;
  const float* qs = q.f32();
  float* os = out.f32();
  float* ls = lse.f32();
  const int64_t qstride = d.Hq * D, ostride = d.Ho * D;  // floats per token
  const int64_t ld = padded_ld(T);
  const float* kt = transpose_heads(cpu::Scratch::kA, k.f32(), T, d.Hkv, D, ld, d.Hkv * D);  // (Hkv, D, ld)
  const float* vh = head_major(cpu::Scratch::kB, v.f32(), T, d.Hkv, D, d.Hkv * D);           // (Hkv, T, D)

  // Item = (head h, query t); scratch = scores (T).
  for_rows_cyclic(d.Hq * T, static_cast<size_t>(T), [&](int64_t item, float* s) {
    const int64_t h = item / T, t = item % T, kvh = h / d.group;
    const int64_t j0 = doc_start[t];
    ls[h * T + t] = forward_row(qs + t * qstride + h * D, kt + kvh * D * ld + j0, ld, vh + (kvh * T + j0) * D,
                                D, D, t - j0 + 1, scale, s, os + t * ostride + h * D);
  });
}

// From the saved lse the probabilities are recomputed, P = exp(scale q.k - lse), and with
// delta = rowsum(dout * out):
//   dS = P * (dout . v - delta);  dq = scale dS k;  dk = scale dS^T q;  dv = P^T dout,
// dk and dv summed over the query heads of their group. Two passes keep every row owned by one
// thread: pass 1 walks (query head, query row) for dq, pass 2 walks (kv head, key row) for dk and
// dv, recomputing P and dS rather than sharing them across threads.
void CpuOps::attention_backward(Tensor q, Tensor k, Tensor v, AttentionMask mask, float scale, Tensor out,
                                Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "attention_backward";
  const int32_t* doc_start = mask.doc_start;
  const Dims d = check_qkv(op, q, k, v, doc_start, out, lse);
  cpu::expect_like(op, "dout", dout, "out", out);
  cpu::expect_like(op, "dq", dq, "q", q);
  cpu::expect_like(op, "dk", dk, "k", k);
  cpu::expect_like(op, "dv", dv, "v", v);
  const int64_t T = d.T, D = d.D;
  if (T == 0 || d.Hq == 0 || D == 0) return;
  const float* qs = q.f32();
  const float* ks = k.f32();
  const float* vs = v.f32();
  const float* os = out.f32();
  const float* ls = lse.f32();
  const float* gs = dout.f32();
  const int64_t qstride = d.Hq * D, kstride = d.Hkv * D, ostride = d.Ho * D;
  const int64_t ld = padded_ld(T);

  // delta (Hq,T) = rowsum(dout * out).
  float* delta = cpu::scratch(cpu::Scratch::kE, static_cast<size_t>(d.Hq * T));
  ThreadPool::global().parallel_for(
      d.Hq * T,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const int64_t h = i / T, t = i % T;
          const float* g = gs + t * ostride + h * D;
          const float* o = os + t * ostride + h * D;
          float sum = 0.0f;
          for (int64_t c = 0; c < D; ++c) sum += g[c] * o[c];
          delta[i] = sum;
        }
      },
      64);

  // Pass 1: the dq row of (h, t) over keys j in [doc_start[t], t].
  {
    const float* kt = transpose_heads(cpu::Scratch::kA, ks, T, d.Hkv, D, ld, kstride);  // (Hkv, D, ld)
    const float* vt = transpose_heads(cpu::Scratch::kB, vs, T, d.Hkv, D, ld, kstride);
    const float* kh = head_major(cpu::Scratch::kC, ks, T, d.Hkv, D, kstride);  // (Hkv, T, D)
    float* dqs = dq.f32();
    for_rows_cyclic(d.Hq * T, static_cast<size_t>(2 * T), [&](int64_t item, float* scratch) {
      const int64_t h = item / T, t = item % T, kvh = h / d.group;
      const int64_t j0 = doc_start[t];
      dq_row(qs + t * qstride + h * D, gs + t * ostride + h * D, kt + kvh * D * ld + j0,
             vt + kvh * D * ld + j0, ld, kh + (kvh * T + j0) * D, D, D, t - j0 + 1, scale, ls[h * T + t],
             delta[h * T + t], scratch, scratch + T, dqs + t * qstride + h * D);
    });
  }

  // Pass 2: the dk and dv rows of (kv head g, key j), over the group's query heads, then the
  // queries t in [j, e) of j's document (contiguous, so it ends where doc_start passes j).
  {
    const float* qt = transpose_heads(cpu::Scratch::kA, qs, T, d.Hq, D, ld, qstride);  // (Hq, D, ld)
    const float* gt = transpose_heads(cpu::Scratch::kB, gs, T, d.Hq, D, ld, ostride);
    const float* qh = head_major(cpu::Scratch::kC, qs, T, d.Hq, D, qstride);  // (Hq, T, D)
    const float* gh = head_major(cpu::Scratch::kD, gs, T, d.Hq, D, ostride);
    // end[j] = one past the last token of j's document.
    std::vector<int64_t> end(static_cast<size_t>(T));
    for (int64_t t = T - 1; t >= 0; --t)
      end[t] = (t + 1 < T && doc_start[t + 1] == doc_start[t]) ? end[t + 1] : t + 1;
    float* dks = dk.f32();
    float* dvs = dv.f32();
    for_rows_cyclic(d.Hkv * T, static_cast<size_t>(2 * T + 2 * D), [&](int64_t item, float* scratch) {
      const int64_t g = item / T, j = item % T, n = end[j] - j;
      float* kacc = scratch + 2 * T;
      float* vacc = kacc + D;
      std::fill(kacc, kacc + 2 * D, 0.0f);
      for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
        dkdv_head(ks + j * kstride + g * D, vs + j * kstride + g * D, qt + h * D * ld + j,
                  gt + h * D * ld + j, ld, qh + (h * T + j) * D, gh + (h * T + j) * D, D, ls + h * T + j,
                  delta + h * T + j, D, n, scale, scratch, scratch + T, kacc, vacc);
      }
      float* dkr = dks + j * kstride + g * D;
      float* dvr = dvs + j * kstride + g * D;
      for (int64_t i = 0; i < D; ++i) {
        dkr[i] = scale * kacc[i];
        dvr[i] = vacc[i];
      }
    });
  }
}

}  // namespace ferry
