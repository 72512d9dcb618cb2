// Forward (and analytic backward) values of the CPU ops against naive double-precision
// implementations written here, plus the properties the rest of ferry relies on: packing
// documents equals running them apart, GQA equals MHA with repeated kv heads, ignored targets
// contribute nothing, and every op is bit-identical run to run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "test_util.h"

namespace ferry {
namespace {

// The CPU backend's summed loss in double: the number behind Ops::linear_cross_entropy's fp32
// accumulator, whose rounding (1e-7 relative) would swamp the checks below.
double ce_sum(Ops& ops, Tensor x, Tensor w, const int32_t* targets, float grad_scale, Tensor dx, Tensor dw,
              Tensor logits) {
  return dynamic_cast<CpuOps&>(ops).linear_cross_entropy_sum(x, w, targets, grad_scale, dx, dw, logits);
}

using test::all_close;
using test::random_vector;
using Vec = std::vector<float>;
using DVec = std::vector<double>;

// fp32 against a double reference: ~1e-5 relative (DESIGN.md §6.3), with a small absolute floor
// for values near zero.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

Vec to_float(const DVec& d) {
  return Vec(d.begin(), d.end());
}
Tensor T1(Vec& v, int64_t a) {
  return Tensor::f32(v.data(), {a});
}
Tensor T2(Vec& v, int64_t a, int64_t b) {
  return Tensor::f32(v.data(), {a, b});
}
Tensor T3(Vec& v, int64_t a, int64_t b, int64_t c) {
  return Tensor::f32(v.data(), {a, b, c});
}
// Equal bits, where == would take -0 for +0.
bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class OpsReference : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// ---------------------------------------------------------------- embedding

TEST_F(OpsReference, EmbeddingGathersAndScatterAddsInTokenOrder) {
  const int64_t V = 11, H = 33, T = 9;
  Vec table = random_vector(V * H, 1);
  std::vector<int32_t> ids = {3, 0, 3, 10, 7, 3, 0, 5, 10};  // repeated ids
  Vec out(T * H);
  ops->embedding_forward(ids.data(), T2(table, V, H), T2(out, T, H));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) ASSERT_EQ(out[t * H + i], table[ids[t] * H + i]);

  Vec dout = random_vector(T * H, 2);
  Vec dtable = random_vector(V * H, 3);  // accumulated into
  Vec expected = dtable;
  for (int64_t t = 0; t < T; ++t)  // float sums in token order: the exact expected bits
    for (int64_t i = 0; i < H; ++i) expected[ids[t] * H + i] += dout[t * H + i];
  ops->embedding_backward(ids.data(), T2(dout, T, H), T2(dtable, V, H));
  EXPECT_EQ(0, std::memcmp(dtable.data(), expected.data(), expected.size() * sizeof(float)));
}

TEST_F(OpsReference, EmbeddingRejectsIdsOutsideTheVocabulary) {
  Vec table = random_vector(4 * 8, 1), out(2 * 8);
  std::vector<int32_t> ids = {1, 4};
  EXPECT_THROW(ops->embedding_forward(ids.data(), T2(table, 4, 8), T2(out, 2, 8)), Error);
  ids = {-1, 0};
  EXPECT_THROW(ops->embedding_forward(ids.data(), T2(table, 4, 8), T2(out, 2, 8)), Error);
}

// ---------------------------------------------------------------- rmsnorm

struct RmsRef {
  DVec out, rstd, dx, dw;
};

RmsRef rmsnorm_ref(const Vec& x, const Vec& w, const Vec& g, int64_t R, int64_t D, double eps) {
  RmsRef r{DVec(R * D), DVec(R), DVec(R * D), DVec(D, 0.0)};
  for (int64_t i = 0; i < R; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(x[i * D + j]) * x[i * D + j];
    const double s = 1.0 / std::sqrt(ss / D + eps);
    r.rstd[i] = s;
    double dot = 0;
    for (int64_t j = 0; j < D; ++j) {
      r.out[i * D + j] = x[i * D + j] * s * w[j];
      dot += double(x[i * D + j]) * w[j] * g[i * D + j];
    }
    for (int64_t j = 0; j < D; ++j) {
      r.dx[i * D + j] = s * w[j] * g[i * D + j] - x[i * D + j] * s * s * s * dot / D;
      r.dw[j] += double(g[i * D + j]) * x[i * D + j] * s;
    }
  }
  return r;
}

TEST_F(OpsReference, RmsNormMatchesDoubleReference) {
  for (auto [R, D] : {std::pair<int64_t, int64_t>{33, 31}, {4, 128}, {1, 1}}) {
    SCOPED_TRACE(testing::Message() << "R=" << R << " D=" << D);
    Vec x = random_vector(R * D, 10, -2, 2), w = random_vector(D, 11, 0.5, 1.5), g = random_vector(R * D, 12);
    const float eps = 1e-5f;
    RmsRef ref = rmsnorm_ref(x, w, g, R, D, eps);
    Vec out(R * D), rstd(R);
    ops->rmsnorm_forward(T2(x, R, D), T1(w, D), eps, T2(out, R, D), T1(rstd, R));
    EXPECT_TRUE(all_close(out, to_float(ref.out), kRtol, kAtol, "out"));
    EXPECT_TRUE(all_close(rstd, to_float(ref.rstd), kRtol, 0, "rstd"));

    Vec dx(R * D), dw0 = random_vector(D, 13), dw = dw0;
    ops->rmsnorm_backward(T2(x, R, D), T1(w, D), T1(rstd, R), T2(g, R, D), Tensor(), T2(dx, R, D), T1(dw, D));
    Vec dw_expected(D);
    for (int64_t j = 0; j < D; ++j) dw_expected[j] = float(dw0[j] + ref.dw[j]);  // accumulated
    EXPECT_TRUE(all_close(dx, to_float(ref.dx), kRtol, 1e-5, "dx"));
    EXPECT_TRUE(all_close(dw, dw_expected, kRtol, 1e-5, "dweight"));
  }
}

// rmsnorm_backward's dresidual (ops.h): dx = dresidual + the norm's gradient equals the gradient
// into a temporary followed by add(dresidual, temporary), bit for bit, into a separate dx or in
// place; dweight is unaffected.
TEST_F(OpsReference, RmsNormBackwardResidualEqualsGradientThenAddBitForBit) {
  for (auto [R, D] : {std::pair<int64_t, int64_t>{33, 31}, {300, 256}}) {
    SCOPED_TRACE(testing::Message() << "R=" << R << " D=" << D);
    Vec x = random_vector(R * D, 20, -2, 2), w = random_vector(D, 21, 0.5, 1.5), g = random_vector(R * D, 22),
        res = random_vector(R * D, 23, -3, 3);
    Vec out(R * D), rstd(R);
    ops->rmsnorm_forward(T2(x, R, D), T1(w, D), 1e-5f, T2(out, R, D), T1(rstd, R));
    Vec tmp(R * D), unfused(R * D), fused(R * D), in_place = res, dw_a(D, 0), dw_b(D, 0), dw_c(D, 0);
    ops->rmsnorm_backward(T2(x, R, D), T1(w, D), T1(rstd, R), T2(g, R, D), Tensor(), T2(tmp, R, D),
                          T1(dw_a, D));
    ops->add(T2(res, R, D), T2(tmp, R, D), T2(unfused, R, D));
    ops->rmsnorm_backward(T2(x, R, D), T1(w, D), T1(rstd, R), T2(g, R, D), T2(res, R, D), T2(fused, R, D),
                          T1(dw_b, D));
    ops->rmsnorm_backward(T2(x, R, D), T1(w, D), T1(rstd, R), T2(g, R, D), T2(in_place, R, D),
                          T2(in_place, R, D), T1(dw_c, D));
    EXPECT_TRUE(same_bits(fused, unfused)) << "dx = dresidual + gradient";
    EXPECT_TRUE(same_bits(in_place, unfused)) << "dx += gradient";
    EXPECT_EQ(dw_a, dw_b);
    EXPECT_EQ(dw_a, dw_c);
  }
}

TEST_F(OpsReference, RmsNormAcceptsLeadingDimsFlattened) {
  const int64_t B = 3, S = 5, D = 16;
  Vec x = random_vector(B * S * D, 1), w = random_vector(D, 2), a(B * S * D), b(B * S * D), ra(B * S),
      rb(B * S);
  ops->rmsnorm_forward(T3(x, B, S, D), T1(w, D), 1e-6f, T3(a, B, S, D), T2(ra, B, S));
  ops->rmsnorm_forward(T2(x, B * S, D), T1(w, D), 1e-6f, T2(b, B * S, D), T1(rb, B * S));
  EXPECT_EQ(a, b);
  EXPECT_EQ(ra, rb);
}

// ---------------------------------------------------------------- rope

// Hugging Face: inv_freq = 1 / base^(arange(0, D, 2) / D) in fp32.
Vec hf_inv_freq(int64_t D, float base) {
  Vec f(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) f[i] = 1.0f / std::pow(base, float(2 * i) / float(D));
  return f;
}

TEST_F(OpsReference, RopeMatchesRotateHalfConvention) {
  const int64_t T = 7, Hh = 3, D = 64;
  Vec x = random_vector(T * Hh * D, 20), y = x;
  std::vector<int32_t> pos = {0, 1, 2, 17, 300, 4095, 31};
  Vec inv = hf_inv_freq(D, 10000.0f);
  ops->rope(T3(y, T, Hh, D), pos.data(), inv.data(), false);
  // q * cos + rotate_half(q) * sin with cos/sin = cat(freqs, freqs), rotate_half = cat(-x2, x1).
  DVec expected(T * Hh * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hh; ++h)
      for (int64_t i = 0; i < D; ++i) {
        const int64_t f = i % (D / 2);
        const double angle = double(float(pos[t]) * inv[f]);  // fp32 product, as transformers
        const float* r = &x[(t * Hh + h) * D];
        const double rot = i < D / 2 ? -double(r[i + D / 2]) : double(r[i - D / 2]);
        expected[(t * Hh + h) * D + i] = r[i] * std::cos(angle) + rot * std::sin(angle);
      }
  EXPECT_TRUE(all_close(y, to_float(expected), kRtol, 2e-6, "rope"));
}

// ---------------------------------------------------------------- attention

struct AttnRef {
  DVec out, lse, dq, dk, dv;
};

// Attention over one document [s, e) at a time in double, each document as its own causal
// sequence; explicit softmax over the masked scores; the backward by the textbook formulas.
AttnRef attention_ref(const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
                      const std::vector<std::pair<int64_t, int64_t>>& docs, int64_t T, int64_t Hq,
                      int64_t Hkv, int64_t D, double scale) {
  AttnRef r{DVec(T * Hq * D, 0), DVec(Hq * T, 0), DVec(T * Hq * D, 0), DVec(T * Hkv * D, 0),
            DVec(T * Hkv * D, 0)};
  const int64_t group = Hq / Hkv;
  for (auto [s, e] : docs) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / group;
      for (int64_t t = s; t < e; ++t) {
        DVec sc(t - s + 1), p(t - s + 1);
        double m = -INFINITY;
        for (int64_t j = s; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i) dot += double(q[(t * Hq + h) * D + i]) * k[(j * Hkv + g) * D + i];
          sc[j - s] = scale * dot;
          m = std::max(m, sc[j - s]);
        }
        double l = 0;
        for (int64_t j = s; j <= t; ++j) l += std::exp(sc[j - s] - m);
        for (int64_t j = s; j <= t; ++j) p[j - s] = std::exp(sc[j - s] - m) / l;
        r.lse[h * T + t] = m + std::log(l);
        for (int64_t i = 0; i < D; ++i) {
          double o = 0;
          for (int64_t j = s; j <= t; ++j) o += p[j - s] * v[(j * Hkv + g) * D + i];
          r.out[(t * Hq + h) * D + i] = o;
        }
        // dP_j = dout . v_j;  dS = P (dP - sum_j P_j dP_j).
        DVec dp(t - s + 1);
        double pdp = 0;
        for (int64_t j = s; j <= t; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < D; ++i)
            dot += double(dout[(t * Hq + h) * D + i]) * v[(j * Hkv + g) * D + i];
          dp[j - s] = dot;
          pdp += p[j - s] * dot;
        }
        for (int64_t j = s; j <= t; ++j) {
          const double ds = p[j - s] * (dp[j - s] - pdp);
          for (int64_t i = 0; i < D; ++i) {
            r.dq[(t * Hq + h) * D + i] += scale * ds * k[(j * Hkv + g) * D + i];
            r.dk[(j * Hkv + g) * D + i] += scale * ds * q[(t * Hq + h) * D + i];
            r.dv[(j * Hkv + g) * D + i] += p[j - s] * dout[(t * Hq + h) * D + i];
          }
        }
      }
    }
  }
  return r;
}

std::vector<int32_t> doc_starts(const std::vector<std::pair<int64_t, int64_t>>& docs, int64_t T) {
  std::vector<int32_t> ds(T);
  for (auto [s, e] : docs)
    for (int64_t t = s; t < e; ++t) ds[t] = int32_t(s);
  return ds;
}

struct AttnRun {
  Vec out, lse, dq, dk, dv;
};

AttnRun run_attention(Ops& ops, Vec& q, Vec& k, Vec& v, Vec& dout, const std::vector<int32_t>& ds, int64_t T,
                      int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  AttnRun r{Vec(T * Hq * D), Vec(Hq * T), Vec(T * Hq * D), Vec(T * Hkv * D), Vec(T * Hkv * D)};
  ops.attention_forward(T3(q, T, Hq, D), T3(k, T, Hkv, D), T3(v, T, Hkv, D), ds.data(), scale,
                        T3(r.out, T, Hq, D), T2(r.lse, Hq, T));
  ops.attention_backward(T3(q, T, Hq, D), T3(k, T, Hkv, D), T3(v, T, Hkv, D), ds.data(), scale,
                         T3(r.out, T, Hq, D), T2(r.lse, Hq, T), T3(dout, T, Hq, D), T3(r.dq, T, Hq, D),
                         T3(r.dk, T, Hkv, D), T3(r.dv, T, Hkv, D));
  return r;
}

TEST_F(OpsReference, AttentionMatchesPerDocumentSoftmax) {
  const int64_t T = 33, Hq = 4, Hkv = 2, D = 16;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<std::pair<int64_t, int64_t>> docs = {{0, 14}, {14, 15}, {15, 33}};  // one of length 1
  Vec q = random_vector(T * Hq * D, 30, -2, 2), k = random_vector(T * Hkv * D, 31, -2, 2),
      v = random_vector(T * Hkv * D, 32), dout = random_vector(T * Hq * D, 33);
  AttnRef ref = attention_ref(q, k, v, dout, docs, T, Hq, Hkv, D, scale);
  AttnRun run = run_attention(*ops, q, k, v, dout, doc_starts(docs, T), T, Hq, Hkv, D, scale);
  EXPECT_TRUE(all_close(run.out, to_float(ref.out), kRtol, 2e-6, "out"));
  EXPECT_TRUE(all_close(run.lse, to_float(ref.lse), kRtol, 2e-6, "lse"));
  EXPECT_TRUE(all_close(run.dq, to_float(ref.dq), kRtol, 5e-6, "dq"));
  EXPECT_TRUE(all_close(run.dk, to_float(ref.dk), kRtol, 5e-6, "dk"));
  EXPECT_TRUE(all_close(run.dv, to_float(ref.dv), kRtol, 5e-6, "dv"));
}

TEST_F(OpsReference, AttentionPackingEqualsSeparateDocuments) {
  const int64_t T = 33, Hq = 4, Hkv = 2, D = 16, split = 13;
  const float scale = 0.3f;
  Vec q = random_vector(T * Hq * D, 40, -2, 2), k = random_vector(T * Hkv * D, 41, -2, 2),
      v = random_vector(T * Hkv * D, 42), dout = random_vector(T * Hq * D, 43);
  AttnRun packed =
      run_attention(*ops, q, k, v, dout, doc_starts({{0, split}, {split, T}}, T), T, Hq, Hkv, D, scale);
  for (auto [s, e] : {std::pair<int64_t, int64_t>{0, split}, {split, T}}) {
    const int64_t n = e - s;
    auto rows = [&](const Vec& x, int64_t width) {
      return Vec(x.begin() + s * width, x.begin() + e * width);
    };
    Vec qd = rows(q, Hq * D), kd = rows(k, Hkv * D), vd = rows(v, Hkv * D), gd = rows(dout, Hq * D);
    AttnRun alone = run_attention(*ops, qd, kd, vd, gd, doc_starts({{0, n}}, n), n, Hq, Hkv, D, scale);
    // The same keys in the same order: bit-identical, not merely close.
    EXPECT_EQ(alone.out, rows(packed.out, Hq * D));
    EXPECT_EQ(alone.dq, rows(packed.dq, Hq * D));
    EXPECT_EQ(alone.dk, rows(packed.dk, Hkv * D));
    EXPECT_EQ(alone.dv, rows(packed.dv, Hkv * D));
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t t = 0; t < n; ++t) EXPECT_EQ(alone.lse[h * n + t], packed.lse[h * T + s + t]);
  }
}

TEST_F(OpsReference, GqaEqualsMhaWithRepeatedKvHeads) {
  const int64_t T = 31, Hq = 6, Hkv = 2, D = 8, group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(float(D));
  Vec q = random_vector(T * Hq * D, 50, -2, 2), k = random_vector(T * Hkv * D, 51, -2, 2),
      v = random_vector(T * Hkv * D, 52), dout = random_vector(T * Hq * D, 53);
  Vec k_rep(T * Hq * D), v_rep(T * Hq * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < D; ++i) {
        k_rep[(t * Hq + h) * D + i] = k[(t * Hkv + h / group) * D + i];
        v_rep[(t * Hq + h) * D + i] = v[(t * Hkv + h / group) * D + i];
      }
  auto ds = doc_starts({{0, 20}, {20, T}}, T);
  AttnRun gqa = run_attention(*ops, q, k, v, dout, ds, T, Hq, Hkv, D, scale);
  AttnRun mha = run_attention(*ops, q, k_rep, v_rep, dout, ds, T, Hq, Hq, D, scale);
  EXPECT_EQ(gqa.out, mha.out);
  EXPECT_EQ(gqa.lse, mha.lse);
  EXPECT_EQ(gqa.dq, mha.dq);
  // A kv head's gradient is the sum of its repeats' gradients.
  Vec dk_sum(T * Hkv * D, 0), dv_sum(T * Hkv * D, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < D; ++i) {
        dk_sum[(t * Hkv + h / group) * D + i] += mha.dk[(t * Hq + h) * D + i];
        dv_sum[(t * Hkv + h / group) * D + i] += mha.dv[(t * Hq + h) * D + i];
      }
  EXPECT_TRUE(all_close(gqa.dk, dk_sum, kRtol, 2e-6, "dk"));
  EXPECT_TRUE(all_close(gqa.dv, dv_sum, kRtol, 2e-6, "dv"));
}

// ---------------------------------------------------------------- swiglu

TEST_F(OpsReference, SwigluMatchesDoubleReference) {
  const int64_t T = 33, F = 127;
  Vec g = random_vector(T * F, 60, -6, 6), u = random_vector(T * F, 61), d = random_vector(T * F, 62);
  Vec out(T * F), dg(T * F), du(T * F), out_again(T * F);
  ops->swiglu_forward(T2(g, T, F), T2(u, T, F), T2(out, T, F));
  ops->swiglu_backward(T2(g, T, F), T2(u, T, F), T2(d, T, F), T2(dg, T, F), T2(du, T, F),
                       T2(out_again, T, F));
  // The backward's activation is the forward's, bit for bit (a backward reads it instead).
  EXPECT_EQ(out_again, out);
  DVec eo(T * F), edg(T * F), edu(T * F);
  for (int64_t i = 0; i < T * F; ++i) {
    const double sig = 1.0 / (1.0 + std::exp(-double(g[i])));
    eo[i] = g[i] * sig * u[i];
    edg[i] = double(d[i]) * u[i] * sig * (1 + g[i] * (1 - sig));
    edu[i] = d[i] * g[i] * sig;
  }
  EXPECT_TRUE(all_close(out, to_float(eo), kRtol, kAtol, "out"));
  EXPECT_TRUE(all_close(dg, to_float(edg), kRtol, kAtol, "dgate"));
  EXPECT_TRUE(all_close(du, to_float(edu), kRtol, kAtol, "dup"));
}

// ---------------------------------------------------------------- linear

TEST_F(OpsReference, LinearMatchesTripleLoop) {
  const int64_t T = 31, In = 33, Out = 127;
  Vec x = random_vector(T * In, 70), w = random_vector(Out * In, 71), b = random_vector(Out, 72),
      dy = random_vector(T * Out, 73);
  Vec y(T * Out);
  ops->linear_forward(T2(x, T, In), T2(w, Out, In), T1(b, Out), Tensor(), T2(y, T, Out));
  DVec ey(T * Out), edx(T * In, 0), edw(Out * In, 0), edb(Out, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < Out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < In; ++i) s += double(x[t * In + i]) * w[o * In + i];
      ey[t * Out + o] = s;
      edb[o] += dy[t * Out + o];
      for (int64_t i = 0; i < In; ++i) {
        edx[t * In + i] += double(dy[t * Out + o]) * w[o * In + i];
        edw[o * In + i] += double(dy[t * Out + o]) * x[t * In + i];
      }
    }
  EXPECT_TRUE(all_close(y, to_float(ey), kRtol, 2e-6, "y"));

  Vec y_nobias(T * Out);
  ops->linear_forward(T2(x, T, In), T2(w, Out, In), Tensor(), Tensor(), T2(y_nobias, T, Out));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < Out; ++o) ey[t * Out + o] -= b[o];
  EXPECT_TRUE(all_close(y_nobias, to_float(ey), kRtol, 2e-6, "y without bias"));

  Vec dx(T * In), dw0 = random_vector(Out * In, 74), dw = dw0, db0 = random_vector(Out, 75), db = db0;
  ops->linear_backward(T2(x, T, In), T2(w, Out, In), T2(dy, T, Out), T2(dx, T, In), T2(dw, Out, In),
                       T1(db, Out), false);
  for (int64_t i = 0; i < Out * In; ++i) edw[i] += dw0[i];
  for (int64_t o = 0; o < Out; ++o) edb[o] += db0[o];
  EXPECT_TRUE(all_close(dx, to_float(edx), kRtol, 5e-6, "dx"));
  EXPECT_TRUE(all_close(dw, to_float(edw), kRtol, 5e-6, "dw (accumulated)"));
  EXPECT_TRUE(all_close(db, to_float(edb), kRtol, 5e-6, "dbias (accumulated)"));

  // dx empty: skipped; dw still accumulates.
  Vec dw2 = dw0;
  ops->linear_backward(T2(x, T, In), T2(w, Out, In), T2(dy, T, Out), Tensor(), T2(dw2, Out, In), Tensor(),
                       false);
  EXPECT_TRUE(all_close(dw2, to_float(edw), kRtol, 5e-6, "dw without dx"));
}

// The fused adds of ops.h (linear_forward's residual, linear_backward's accumulate_dx) must equal
// the op into a temporary followed by add() bit for bit: the decoder layer switched to them, and
// every engine and trainer test compares against numbers the unfused layer produced.
TEST_F(OpsReference, LinearResidualAndAccumulateEqualProductThenAddBitForBit) {
  // Odd sizes, and one large enough for OpenBLAS's blocking and the pool's split of add().
  for (auto [T, In, Out] : {std::tuple<int64_t, int64_t, int64_t>{31, 33, 127}, {300, 257, 129}}) {
    SCOPED_TRACE(testing::Message() << "T=" << T << " In=" << In << " Out=" << Out);
    Vec x = random_vector(T * In, 80), w = random_vector(Out * In, 81), b = random_vector(Out, 82),
        r = random_vector(T * Out, 83, -3, 3), dy = random_vector(T * Out, 84),
        dx0 = random_vector(T * In, 85);
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(with_bias ? "bias" : "no bias");
      const Tensor bias = with_bias ? T1(b, Out) : Tensor();
      Vec tmp(T * Out), unfused(T * Out), fused(T * Out), in_place = r;
      ops->linear_forward(T2(x, T, In), T2(w, Out, In), bias, Tensor(), T2(tmp, T, Out));
      ops->add(T2(r, T, Out), T2(tmp, T, Out), T2(unfused, T, Out));
      ops->linear_forward(T2(x, T, In), T2(w, Out, In), bias, T2(r, T, Out), T2(fused, T, Out));
      ops->linear_forward(T2(x, T, In), T2(w, Out, In), bias, T2(in_place, T, Out), T2(in_place, T, Out));
      EXPECT_TRUE(same_bits(fused, unfused)) << "y = residual + product";
      EXPECT_TRUE(same_bits(in_place, unfused)) << "y += product";
    }

    // dx += dy @ w; dw and dbias accumulate as before, whichever way dx goes.
    Vec tmp(T * In), dx_unfused = dx0, dx_fused = dx0, dw_a(Out * In, 0), dw_b(Out * In, 0), db_a(Out, 0),
                     db_b(Out, 0);
    ops->linear_backward(T2(x, T, In), T2(w, Out, In), T2(dy, T, Out), T2(tmp, T, In), T2(dw_a, Out, In),
                         T1(db_a, Out), false);
    ops->add(T2(dx_unfused, T, In), T2(tmp, T, In), T2(dx_unfused, T, In));
    ops->linear_backward(T2(x, T, In), T2(w, Out, In), T2(dy, T, Out), T2(dx_fused, T, In), T2(dw_b, Out, In),
                         T1(db_b, Out), true);
    EXPECT_TRUE(same_bits(dx_fused, dx_unfused)) << "dx += dy @ w";
    EXPECT_TRUE(same_bits(dw_a, dw_b)) << "dw";
    EXPECT_TRUE(same_bits(db_a, db_b)) << "dbias";
  }
}

// ---------------------------------------------------------------- cross-entropy

struct CeRef {
  double loss = 0;
  DVec logits, dx, dw;
};

CeRef cross_entropy_ref(const Vec& x, const Vec& w, const std::vector<int32_t>& tg, int64_t T, int64_t V,
                        int64_t H, double grad_scale) {
  CeRef r{0, DVec(T * V), DVec(T * H, 0), DVec(V * H, 0)};
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t o = 0; o < V; ++o) {
      double s = 0;
      for (int64_t i = 0; i < H; ++i) s += double(x[t * H + i]) * w[o * H + i];
      r.logits[t * V + o] = s;
    }
    if (tg[t] == kIgnoreIndex) continue;
    double m = -INFINITY, l = 0;
    for (int64_t o = 0; o < V; ++o) m = std::max(m, r.logits[t * V + o]);
    for (int64_t o = 0; o < V; ++o) l += std::exp(r.logits[t * V + o] - m);
    const double logz = m + std::log(l);
    r.loss += logz - r.logits[t * V + tg[t]];  // -log_softmax at the target
    for (int64_t o = 0; o < V; ++o) {
      const double dl = grad_scale * (std::exp(r.logits[t * V + o] - logz) - (o == tg[t] ? 1.0 : 0.0));
      for (int64_t i = 0; i < H; ++i) {
        r.dx[t * H + i] += dl * w[o * H + i];
        r.dw[o * H + i] += dl * x[t * H + i];
      }
    }
  }
  return r;
}

TEST_F(OpsReference, CrossEntropyMatchesLogSoftmaxAcrossChunks) {
  // T = 300 spans two chunks of 256 tokens.
  const int64_t T = 300, V = 127, H = 31;
  const float grad_scale = 0.25f;
  Vec x = random_vector(T * H, 80, -2, 2), w = random_vector(V * H, 81);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[t] = (t % 7 == 3) ? kIgnoreIndex : int32_t((t * 37 + 5) % V);
  CeRef ref = cross_entropy_ref(x, w, tg, T, V, H, grad_scale);

  Vec dx(T * H), dw0 = random_vector(V * H, 82), dw = dw0, logits(T * V);
  const double loss = ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), grad_scale, T2(dx, T, H),
                             T2(dw, V, H), T2(logits, T, V));
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::fabs(ref.loss));
  for (int64_t i = 0; i < V * H; ++i) ref.dw[i] += dw0[i];
  EXPECT_TRUE(all_close(logits, to_float(ref.logits), kRtol, 2e-6, "logits"));
  EXPECT_TRUE(all_close(dx, to_float(ref.dx), kRtol, 1e-6, "dx"));
  EXPECT_TRUE(all_close(dw, to_float(ref.dw), kRtol, 1e-5, "dw (accumulated)"));

  // Without gradients or logits the loss is the same number.
  const double loss_only =
      ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), grad_scale, Tensor(), Tensor(), Tensor());
  EXPECT_EQ(loss_only, loss);
}

TEST_F(OpsReference, IgnoredTargetsContributeNothing) {
  const int64_t T = 33, V = 127, H = 31;
  Vec x = random_vector(T * H, 90, -2, 2), w = random_vector(V * H, 91);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[t] = (t % 4 == 1) ? kIgnoreIndex : int32_t((t * 13 + 1) % V);
  auto run = [&](Vec& xs, Vec& dx, Vec& dw) {
    return ce_sum(*ops, T2(xs, T, H), T2(w, V, H), tg.data(), 1.0f, T2(dx, T, H), T2(dw, V, H), Tensor());
  };
  Vec dx(T * H), dw(V * H, 0);
  const double loss = run(x, dx, dw);
  for (int64_t t = 0; t < T; ++t) {
    if (tg[t] != kIgnoreIndex) continue;
    for (int64_t i = 0; i < H; ++i) EXPECT_EQ(dx[t * H + i], 0.0f);
  }

  // Whatever the ignored rows hold, loss, dw and the other rows of dx stay bit for bit the same.
  Vec x2 = x;
  for (int64_t t = 0; t < T; ++t) {
    if (tg[t] != kIgnoreIndex) continue;
    for (int64_t i = 0; i < H; ++i) x2[t * H + i] = 100.0f * (i % 3 == 0 ? -1.0f : 1.0f);
  }
  Vec dx2(T * H), dw2(V * H, 0);
  EXPECT_EQ(run(x2, dx2, dw2), loss);
  EXPECT_EQ(dx2, dx);
  EXPECT_EQ(dw2, dw);

  // And the loss equals that of the counted rows alone.
  std::vector<int32_t> all_ignored(T, kIgnoreIndex);
  EXPECT_EQ(ce_sum(*ops, T2(x, T, H), T2(w, V, H), all_ignored.data(), 1.0f, Tensor(), Tensor(), Tensor()),
            0.0);
  Vec xc;
  std::vector<int32_t> tc;
  for (int64_t t = 0; t < T; ++t) {
    if (tg[t] == kIgnoreIndex) continue;
    xc.insert(xc.end(), x.begin() + t * H, x.begin() + (t + 1) * H);
    tc.push_back(tg[t]);
  }
  const int64_t n = int64_t(tc.size());
  const double counted =
      ce_sum(*ops, T2(xc, n, H), T2(w, V, H), tc.data(), 1.0f, Tensor(), Tensor(), Tensor());
  // sgemm over fewer rows may round the logits differently in the last bit, hence not EXPECT_EQ.
  EXPECT_NEAR(counted, loss, 1e-7 * loss);
}

// Through the interface the loss is added, rounded to fp32 once, to a one-element accumulator; the
// gradients are the same bits as the double-sum path's.
// The products of ops/cpu/ordered_gemm.h: a row of y or dx does not depend on the rows around it,
// and dw, dbias take their tokens one after another onto their value, so a linear layer over
// tokens cut anywhere (one-token pieces included) gives the bits of one call over all of them --
// what a layer run over sequence tiles relies on. Sizes around the 4-wide and 8-lane edges.
TEST_F(OpsReference, LinearIsRowInvariantAndSumsGradientsTokenAfterToken) {
  const int64_t T = 37, in = 33, out = 31;
  Vec x = random_vector(T * in, 11), w = random_vector(out * in, 12), b = random_vector(out, 13),
      dy = random_vector(T * out, 14);
  Vec y(T * out), dx(T * in), dw(out * in, 0.5f), db(out, 0.25f);
  ops->linear_forward(T2(x, T, in), T2(w, out, in), Tensor::f32(b.data(), {out}), Tensor(), T2(y, T, out));
  ops->linear_backward(T2(x, T, in), T2(w, out, in), T2(dy, T, out), T2(dx, T, in), T2(dw, out, in),
                       Tensor::f32(db.data(), {out}), false);
  for (int64_t piece : {1, 4, 5, 16}) {
    SCOPED_TRACE("pieces of " + std::to_string(piece));
    Vec y2(T * out), dx2(T * in), dw2(out * in, 0.5f), db2(out, 0.25f);
    for (int64_t t0 = 0; t0 < T; t0 += piece) {
      const int64_t n = std::min(piece, T - t0);
      const Tensor xs = Tensor::f32(x.data() + t0 * in, {n, in}),
                   dys = Tensor::f32(dy.data() + t0 * out, {n, out});
      ops->linear_forward(xs, T2(w, out, in), Tensor::f32(b.data(), {out}), Tensor(),
                          Tensor::f32(y2.data() + t0 * out, {n, out}));
      ops->linear_backward(xs, T2(w, out, in), dys, Tensor::f32(dx2.data() + t0 * in, {n, in}),
                           T2(dw2, out, in), Tensor::f32(db2.data(), {out}), false);
    }
    EXPECT_EQ(y2, y);
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(dw2, dw);
    EXPECT_EQ(db2, db);
  }
  // Against a plain double-precision product: the order is fixed, the values are still right.
  for (int64_t t = 0; t < T; t += 7)
    for (int64_t o = 0; o < out; o += 5) {
      double ref = b[o];
      for (int64_t i = 0; i < in; ++i) ref += static_cast<double>(x[t * in + i]) * w[o * in + i];
      EXPECT_NEAR(y[t * out + o], ref, 1e-5 * (1 + std::fabs(ref)));
    }
}

// loss_sum receives each counted token's loss (double, rounded to fp32) in token order, so two
// calls over tokens [0, 20) and [20, 33) give one call's bits (a head run over sequence tiles).
TEST_F(OpsReference, CrossEntropyLossSumAddsEachTokenInOrder) {
  const int64_t T = 33, V = 127, H = 31;
  Vec x = random_vector(T * H, 95, -2, 2), w = random_vector(V * H, 96);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[t] = (t % 6 == 0) ? kIgnoreIndex : int32_t((t * 17 + 2) % V);
  Vec dx1(T * H), dw1(V * H, 0), dx2(T * H), dw2(V * H, 0);
  std::vector<double> rows;
  dynamic_cast<CpuOps&>(*ops).linear_cross_entropy_rows(T2(x, T, H), T2(w, V, H), tg.data(), 0.5f,
                                                        T2(dx1, T, H), T2(dw1, V, H), Tensor(), rows);
  float expected = 1.25f;
  for (int64_t t = 0; t < T; ++t)
    if (tg[t] != kIgnoreIndex) expected += static_cast<float>(rows[static_cast<size_t>(t)]);
  float acc = 1.25f;
  ops->linear_cross_entropy(T2(x, T, H), T2(w, V, H), tg.data(), 0.5f, T2(dx2, T, H), T2(dw2, V, H),
                            Tensor::f32(&acc, {1}), Tensor(), 1);
  EXPECT_EQ(acc, expected);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
  // Two calls over consecutive tokens: the same loss, dx and dw, bit for bit.
  const int64_t A = 20;
  Vec dx4(T * H), dw4(V * H, 0);
  float split = 1.25f;
  ops->linear_cross_entropy(T2(x, A, H), T2(w, V, H), tg.data(), 0.5f, T2(dx4, A, H), T2(dw4, V, H),
                            Tensor::f32(&split, {1}), Tensor(), 1);
  ops->linear_cross_entropy(Tensor::f32(x.data() + A * H, {T - A, H}), T2(w, V, H), tg.data() + A, 0.5f,
                            Tensor::f32(dx4.data() + A * H, {T - A, H}), T2(dw4, V, H),
                            Tensor::f32(&split, {1}), Tensor(), 3);
  EXPECT_EQ(split, acc);
  EXPECT_EQ(dx4, dx2);
  EXPECT_EQ(dw4, dw2);
  // No accumulator: gradients only.
  Vec dx3(T * H);
  ops->linear_cross_entropy(T2(x, T, H), T2(w, V, H), tg.data(), 0.5f, T2(dx3, T, H), Tensor(), Tensor(),
                            Tensor(), 1);
  EXPECT_EQ(dx3, dx1);
}

TEST_F(OpsReference, CrossEntropyRejectsTargetsOutsideTheVocabulary) {
  const int64_t T = 3, V = 5, H = 4;
  Vec x = random_vector(T * H, 1), w = random_vector(V * H, 2);
  for (int32_t bad : {5, -1, -99, 1000}) {
    std::vector<int32_t> tg = {0, bad, 1};
    EXPECT_THROW(ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), 1.0f, Tensor(), Tensor(), Tensor()), Error)
        << bad;
  }
}

// ---------------------------------------------------------------- add, zero, copy

TEST_F(OpsReference, AddZeroCopy) {
  const int64_t n = 1000;
  Vec a = random_vector(n, 100), b = random_vector(n, 101), out(n);
  ops->add(T1(a, n), T1(b, n), T1(out, n));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  Vec a2 = a;
  ops->add(T1(a2, n), T1(b, n), T1(a2, n));  // aliased
  EXPECT_EQ(a2, out);

  ops->zero(T1(a2, n));
  EXPECT_EQ(a2, Vec(n, 0.0f));

  std::vector<uint16_t> bf(n), hf(n), bf_from_hf(n);
  std::vector<double> f64(n);
  Vec back(n);
  ops->copy(T1(a, n), Tensor(bf.data(), DType::BF16, {n}));
  ops->copy(Tensor(bf.data(), DType::BF16, {n}), T1(back, n));
  ops->copy(T1(a, n), Tensor(hf.data(), DType::F16, {10, 100}));  // dims may differ, counts match
  ops->copy(Tensor(hf.data(), DType::F16, {n}), Tensor(bf_from_hf.data(), DType::BF16, {n}));
  ops->copy(T1(a, n), Tensor(f64.data(), DType::F64, {n}));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bf[i], f32_to_bf16(a[i]));
    ASSERT_EQ(back[i], bf16_to_f32(bf[i]));
    ASSERT_EQ(hf[i], f32_to_f16(a[i]));
    ASSERT_EQ(bf_from_hf[i], f32_to_bf16(f16_to_f32(hf[i])));
    ASSERT_EQ(f64[i], double(a[i]));
  }
  Vec same(n);
  ops->copy(T1(a, n), T1(same, n));
  EXPECT_EQ(same, a);
  std::vector<uint16_t> bf_zero = bf;
  ops->zero(Tensor(bf_zero.data(), DType::BF16, {n}));
  EXPECT_EQ(bf_zero, std::vector<uint16_t>(n, 0));
}

// ---------------------------------------------------------------- determinism

TEST_F(OpsReference, EveryOpIsBitIdenticalRunToRun) {
  const int64_t T = 257, Hq = 4, Hkv = 2, D = 32, H = 128, V = 1000, F = 344;
  Vec q = random_vector(T * Hq * D, 110, -2, 2), k = random_vector(T * Hkv * D, 111, -2, 2),
      v = random_vector(T * Hkv * D, 112), dout = random_vector(T * Hq * D, 113);
  Vec x = random_vector(T * H, 114), w = random_vector(V * H, 115), nw = random_vector(H, 116),
      g = random_vector(T * H, 117), gate = random_vector(T * F, 118), up = random_vector(T * F, 119),
      dmlp = random_vector(T * F, 120);
  std::vector<int32_t> ds = doc_starts({{0, 100}, {100, 101}, {101, T}}, T), ids(T), tg(T), pos(T);
  for (int64_t t = 0; t < T; ++t) {
    ids[t] = int32_t((t * 7) % 50);
    tg[t] = t % 5 == 0 ? kIgnoreIndex : int32_t((t * 31) % V);
    pos[t] = int32_t(t - ds[t]);
  }
  Vec inv = hf_inv_freq(D, 10000.0f);
  Vec bias = random_vector(V, 122);

  auto run_all = [&]() {
    std::vector<Vec> r;
    AttnRun a = run_attention(*ops, q, k, v, dout, ds, T, Hq, Hkv, D, 0.2f);
    for (Vec* p : {&a.out, &a.lse, &a.dq, &a.dk, &a.dv}) r.push_back(*p);
    Vec y(T * H), rs(T), dx(T * H), dnw(H, 0);
    ops->rmsnorm_forward(T2(x, T, H), T1(nw, H), 1e-5f, T2(y, T, H), T1(rs, T));
    ops->rmsnorm_backward(T2(x, T, H), T1(nw, H), T1(rs, T), T2(g, T, H), Tensor(), T2(dx, T, H), T1(dnw, H));
    Vec ce_dx(T * H), ce_dw(V * H, 0);
    const double loss =
        ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), 0.5f, T2(ce_dx, T, H), T2(ce_dw, V, H), Tensor());
    Vec lin(T * V), lin_dx(T * H), lin_dw(V * H, 0), lin_db(V, 0), dlin = random_vector(T * V, 121);
    ops->linear_forward(T2(x, T, H), T2(w, V, H), T1(bias, V), Tensor(), T2(lin, T, V));
    ops->linear_backward(T2(x, T, H), T2(w, V, H), T2(dlin, T, V), T2(lin_dx, T, H), T2(lin_dw, V, H),
                         T1(lin_db, V), false);
    Vec emb(T * H), demb(50 * H, 0);
    ops->embedding_forward(ids.data(), T2(w, V, H), T2(emb, T, H));
    ops->embedding_backward(ids.data(), T2(g, T, H), T2(demb, 50, H));
    Vec sw(T * F), dg(T * F), du(T * F);
    ops->swiglu_forward(T2(gate, T, F), T2(up, T, F), T2(sw, T, F));
    ops->swiglu_backward(T2(gate, T, F), T2(up, T, F), T2(dmlp, T, F), T2(dg, T, F), T2(du, T, F), Tensor());
    Vec rq = q;
    ops->rope(T3(rq, T, Hq, D), pos.data(), inv.data(), false);
    for (Vec* p : {&y, &rs, &dx, &dnw, &ce_dx, &ce_dw, &lin, &lin_dx, &lin_dw, &lin_db, &emb, &demb, &sw, &dg,
                   &du, &rq})
      r.push_back(*p);
    r.push_back(Vec{float(loss), float(loss - double(float(loss)))});
    return r;
  };
  const std::vector<Vec> first = run_all(), second = run_all();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(first[i].size(), second[i].size());
    EXPECT_EQ(0, std::memcmp(first[i].data(), second[i].data(), first[i].size() * sizeof(float)))
        << "output " << i;
  }
}

// ---------------------------------------------------------------- invariants

TEST(OpsReferenceDeath, ShapeMismatchAbortsWithTheShapes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto ops = make_cpu_ops();
  Vec x(6 * 8), w(8), out(6 * 7), rs(6);
  EXPECT_DEATH(ops->rmsnorm_forward(T2(x, 6, 8), T1(w, 8), 1e-5f, T2(out, 6, 7), T1(rs, 6)),
               "rmsnorm_forward: out is \\(6, 7\\) but x is \\(6, 8\\)");
  std::vector<uint16_t> bf(48);
  EXPECT_DEATH(
      ops->rmsnorm_forward(Tensor(bf.data(), DType::BF16, {6, 8}), T1(w, 8), 1e-5f, T2(out, 6, 8), T1(rs, 6)),
      "x \\(6, 8\\) has dtype BF16");
  Vec q(5 * 3 * 4), k(5 * 2 * 4), o(5 * 3 * 4), lse(15);
  std::vector<int32_t> ds(5, 0);
  EXPECT_DEATH(ops->attention_forward(T3(q, 5, 3, 4), T3(k, 5, 2, 4), T3(k, 5, 2, 4), ds.data(), 1.0f,
                                      T3(o, 5, 3, 4), T2(lse, 3, 5)),
               "Hq a multiple of Hkv");
  // The head's weight gradient over fewer than one logits chunk at a time means nothing.
  Vec hx(3 * 4), hw(5 * 4), hdx(3 * 4);
  std::vector<int32_t> targets = {0, 1, 2};
  EXPECT_DEATH(ops->linear_cross_entropy(T2(hx, 3, 4), T2(hw, 5, 4), targets.data(), 1.0f, T2(hdx, 3, 4),
                                         Tensor(), Tensor(), Tensor(), 0),
               "weight_grad_chunks is 0, expected at least 1");
}

}  // namespace
}  // namespace ferry
