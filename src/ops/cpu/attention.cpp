// Causal self-attention with grouped query heads and document masking, computed exactly (no
// online softmax): query t of head h sees keys j with doc_start[t] <= j <= t of kv head
// h / (Hq / Hkv). Naive O(T^2 D) per head, which is what an oracle should be; the demo model's
// T and D are small enough for it to train at a useful speed on two cores.
//
// Parallel split: every output row (of out, dq, dk or dv) is computed start to finish by one
// thread, in a fixed order, so the results are bit-identical run to run and for any thread count.
// Rows are dealt to threads cyclically because causal rows differ in length.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {

struct Dims {
  int64_t T, Hq, Hkv, D, group;  // group = query heads per kv head
};

// Calls body(item, scratch) for item in [0, count), items dealt round-robin to the pool's threads.
// `scratch` is a per-thread buffer of `scratch_floats` floats.
template <typename Body>
void for_rows_cyclic(int64_t count, size_t scratch_floats, const Body& body) {
  if (count <= 0) return;
  ThreadPool::global().run_on_all([&](size_t piece, size_t pieces) {
    std::vector<float> scratch(scratch_floats);
    for (int64_t i = static_cast<int64_t>(piece); i < count; i += static_cast<int64_t>(pieces))
      body(i, scratch.data());
  });
}

// A dot product in a fixed order: eight interleaved partial sums (which the compiler turns into
// vector lanes), combined pairwise, then the tail.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y (n) += alpha * x (n)
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// doc_start must describe contiguous documents: each token starts a document (doc_start[t] == t)
// or continues the previous token's (doc_start[t] == doc_start[t-1]).
void check_doc_start(const char* op, const int32_t* doc_start, int64_t T) {
  cpu::expect(doc_start != nullptr, op, "doc_start is null");
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
  Dims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], 0};
  cpu::expect(k.shape[0] == d.T && k.shape[2] == d.D && d.Hkv > 0 && d.Hq % d.Hkv == 0, op,
              fmt::format("q is {} and k is {}: need the same T and D, and Hq a multiple of Hkv", q.shape_string(),
                          k.shape_string()));
  d.group = d.Hq / d.Hkv;
  cpu::expect_like(op, "v", v, "k", k);
  cpu::expect_like(op, "out", out, "q", q);
  cpu::expect_shape(op, "lse", lse, {d.Hq, d.T});
  check_doc_start(op, doc_start, d.T);
  return d;
}

}  // namespace

// q (T,Hq,D), k v (T,Hkv,D) -> out (T,Hq,D), lse (Hq,T).
void CpuOps::attention_forward(Tensor q, Tensor k, Tensor v, const int32_t* doc_start, float scale, Tensor out,
                               Tensor lse) {
  const char* op = "attention_forward";
  const Dims d = check_qkv(op, q, k, v, doc_start, out, lse);
  const int64_t T = d.T, D = d.D;
  const float* qs = q.f32();
  const float* ks = k.f32();
  const float* vs = v.f32();
  float* os = out.f32();
  float* ls = lse.f32();
  // Strides of one token in q/out and in k/v.
  const int64_t qstride = d.Hq * D, kstride = d.Hkv * D;

  // Item = (head h, query t); scratch = scores (T) then the output accumulator (D).
  for_rows_cyclic(d.Hq * T, static_cast<size_t>(T + D), [&](int64_t item, float* scratch) {
    const int64_t h = item / T, t = item % T, kvh = h / d.group;
    const float* qr = qs + t * qstride + h * D;
    const int64_t j0 = doc_start[t];
    float* score = scratch;  // score[j - j0], j in [j0, t]
    float* acc = scratch + T;
    float m = -INFINITY;
    for (int64_t j = j0; j <= t; ++j) {
      const float s = scale * dot(qr, ks + j * kstride + kvh * D, D);
      score[j - j0] = s;
      m = std::max(m, s);
    }
    for (int64_t i = 0; i < D; ++i) acc[i] = 0.0f;
    double l = 0.0;
    for (int64_t j = j0; j <= t; ++j) {
      const float p = std::exp(score[j - j0] - m);
      l += p;
      axpy(p, vs + j * kstride + kvh * D, acc, D);
    }
    const float inv = static_cast<float>(1.0 / l);
    float* orow = os + t * qstride + h * D;
    for (int64_t i = 0; i < D; ++i) orow[i] = acc[i] * inv;
    ls[h * T + t] = m + static_cast<float>(std::log(l));
  });
}

// From the saved lse the probabilities are recomputed, P = exp(scale q.k - lse), and with
// delta = rowsum(dout * out):
//   dS = P * (dout . v - delta);  dq = scale dS k;  dk = scale dS^T q;  dv = P^T dout,
// dk and dv summed over the query heads of their group. Two passes keep every row owned by one
// thread: pass 1 walks (query head, query row) for dq, pass 2 walks (kv head, key row) for dk and
// dv, recomputing P and dS rather than sharing them across threads.
void CpuOps::attention_backward(Tensor q, Tensor k, Tensor v, const int32_t* doc_start, float scale, Tensor out,
                                Tensor lse, Tensor dout, Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "attention_backward";
  const Dims d = check_qkv(op, q, k, v, doc_start, out, lse);
  cpu::expect_like(op, "dout", dout, "q", q);
  cpu::expect_like(op, "dq", dq, "q", q);
  cpu::expect_like(op, "dk", dk, "k", k);
  cpu::expect_like(op, "dv", dv, "v", v);
  const int64_t T = d.T, D = d.D;
  const float* qs = q.f32();
  const float* ks = k.f32();
  const float* vs = v.f32();
  const float* os = out.f32();
  const float* ls = lse.f32();
  const float* gs = dout.f32();
  const int64_t qstride = d.Hq * D, kstride = d.Hkv * D;

  // delta (Hq,T) = rowsum(dout * out).
  std::vector<float> delta(static_cast<size_t>(d.Hq * T));
  ThreadPool::global().parallel_for(
      d.Hq * T,
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const int64_t h = i / T, t = i % T;
          delta[i] = dot(gs + t * qstride + h * D, os + t * qstride + h * D, D);
        }
      },
      64);

  // Pass 1: dq row of (h, t) over keys j in [doc_start[t], t].
  float* dqs = dq.f32();
  for_rows_cyclic(d.Hq * T, static_cast<size_t>(D), [&](int64_t item, float* acc) {
    const int64_t h = item / T, t = item % T, kvh = h / d.group;
    const float* qr = qs + t * qstride + h * D;
    const float* gr = gs + t * qstride + h * D;
    const float l = ls[h * T + t], dl = delta[h * T + t];
    for (int64_t i = 0; i < D; ++i) acc[i] = 0.0f;
    for (int64_t j = doc_start[t]; j <= t; ++j) {
      const float* kr = ks + j * kstride + kvh * D;
      const float p = std::exp(scale * dot(qr, kr, D) - l);
      const float ds = p * (dot(gr, vs + j * kstride + kvh * D, D) - dl);
      axpy(ds, kr, acc, D);
    }
    float* dr = dqs + t * qstride + h * D;
    for (int64_t i = 0; i < D; ++i) dr[i] = scale * acc[i];
  });

  // Pass 2: dk and dv rows of (kv head g, key j) over the group's query heads, then the queries
  // t >= j of j's document (documents are contiguous, so they end where doc_start passes j).
  float* dks = dk.f32();
  float* dvs = dv.f32();
  for_rows_cyclic(d.Hkv * T, static_cast<size_t>(2 * D), [&](int64_t item, float* scratch) {
    const int64_t g = item / T, j = item % T;
    const float* kr = ks + j * kstride + g * D;
    const float* vr = vs + j * kstride + g * D;
    float* kacc = scratch;
    float* vacc = scratch + D;
    for (int64_t i = 0; i < 2 * D; ++i) scratch[i] = 0.0f;
    for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h) {
      for (int64_t t = j; t < T && doc_start[t] <= j; ++t) {
        const float* qr = qs + t * qstride + h * D;
        const float* gr = gs + t * qstride + h * D;
        const float p = std::exp(scale * dot(qr, kr, D) - ls[h * T + t]);
        const float ds = p * (dot(gr, vr, D) - delta[h * T + t]);
        axpy(p, gr, vacc, D);
        axpy(ds, qr, kacc, D);
      }
    }
    float* dkr = dks + j * kstride + g * D;
    float* dvr = dvs + j * kstride + g * D;
    for (int64_t i = 0; i < D; ++i) {
      dkr[i] = scale * kacc[i];
      dvr[i] = vacc[i];
    }
  });
}

}  // namespace ferry
