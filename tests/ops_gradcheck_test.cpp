// Every backward of the CPU ops against central differences of its own forward.
//
// The scalar objective is L = sum(r * out) with a fixed random r, so dL/dout = r is what each
// backward receives. L is summed in double in a fixed order: perturbing one input changes only the
// outputs that depend on it, and the rounding of every other term cancels exactly between L(+h)
// and L(-h). With fp32 outputs (relative error ~1e-7) and a step h = 1e-2 on inputs of order 1,
// rounding contributes ~1e-5 and truncation ~h^2 = 1e-4 relative to the derivative. A 5e-3
// relative tolerance plus a small absolute floor (a fraction of the gradient's largest element)
// leaves more than 20x headroom on every check here (measured), and still catches a gradient
// that is 1% off. The divisor is the step actually taken in
// fp32, (x+h) - (x-h) computed in double, not 2h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

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

using test::random_vector;
using Vec = std::vector<float>;

Tensor T1(Vec& v, int64_t a) {
  return Tensor::f32(v.data(), {a});
}
Tensor T2(Vec& v, int64_t a, int64_t b) {
  return Tensor::f32(v.data(), {a, b});
}
Tensor T3(Vec& v, int64_t a, int64_t b, int64_t c) {
  return Tensor::f32(v.data(), {a, b, c});
}

double weighted_sum(const Vec& r, const Vec& out) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(r[i]) * double(out[i]);
  return s;
}

struct GradCheck {
  float step = 1e-2f;
  double rtol = 5e-3;
  double atol_fraction = 5e-4;  // absolute floor, as a fraction of max |analytic|
  size_t samples = 80;          // random elements checked per tensor (all when fewer)
};

// Compares `analytic` (d objective / d param) with central differences on a random subset of
// param's elements. `param` is perturbed in place and restored.
::testing::AssertionResult check_gradient(const std::string& what, Vec& param, const Vec& analytic,
                                          const std::function<double()>& objective, uint64_t seed,
                                          GradCheck c = {}) {
  if (analytic.size() != param.size())
    return ::testing::AssertionFailure()
           << what << ": gradient has " << analytic.size() << " elements, param " << param.size();
  std::vector<size_t> idx(param.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(std::min(idx.size(), c.samples));

  double scale = 0;
  for (float g : analytic) scale = std::max(scale, double(std::fabs(g)));
  if (!std::isfinite(scale)) return ::testing::AssertionFailure() << what << ": gradient is not finite";
  const double atol = c.atol_fraction * scale + 1e-7;

  size_t bad = 0;
  std::string report;
  for (size_t i : idx) {
    const float orig = param[i];
    param[i] = orig + c.step;
    const double hp = param[i];
    const double lp = objective();
    param[i] = orig - c.step;
    const double hm = param[i];
    const double lm = objective();
    param[i] = orig;
    const double fd = (lp - lm) / (hp - hm);
    const double a = analytic[i];
    if (!(std::fabs(a - fd) <= atol + c.rtol * std::fabs(fd))) {
      if (bad++ < 5)
        report += "\n  [" + std::to_string(i) + "] analytic " + std::to_string(a) + " numeric " +
                  std::to_string(fd);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << idx.size() << " sampled elements disagree (rtol " << c.rtol
         << ", atol " << atol << ")" << report;
}

class OpsGradcheck : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// The checker itself must be able to fail: a gradient that is off by 1%, or wrong in a single
// element, is caught.
TEST_F(OpsGradcheck, CheckerCatchesWrongGradients) {
  const int64_t n = 31;
  Vec x = random_vector(n, 1), r = random_vector(n, 2);
  // L = sum r * x^3 / 3  ->  dL/dx = r x^2.
  auto objective = [&] {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(r[i]) * x[i] * x[i] * x[i] / 3.0;
    return s;
  };
  Vec g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = r[i] * x[i] * x[i];
  EXPECT_TRUE(check_gradient("exact", x, g, objective, 3));
  Vec scaled = g;
  for (float& v : scaled) v *= 1.01f;
  EXPECT_FALSE(check_gradient("1% off", x, scaled, objective, 3));
  Vec one_wrong = g;
  auto by_magnitude = [](float a, float b) { return std::fabs(a) < std::fabs(b); };
  const size_t worst = std::max_element(g.begin(), g.end(), by_magnitude) - g.begin();
  one_wrong[worst] = -one_wrong[worst];
  EXPECT_FALSE(check_gradient("one element", x, one_wrong, objective, 3));
}

TEST_F(OpsGradcheck, RmsNorm) {
  const int64_t R = 33, D = 31;
  const float eps = 1e-5f;
  Vec x = random_vector(R * D, 10, -2, 2), w = random_vector(D, 11, 0.5f, 1.5f), r = random_vector(R * D, 12);
  Vec out(R * D), rstd(R);
  auto objective = [&] {
    ops->rmsnorm_forward(T2(x, R, D), T1(w, D), eps, T2(out, R, D), T1(rstd, R));
    return weighted_sum(r, out);
  };
  objective();
  Vec dx(R * D), dw(D, 0.0f);
  ops->rmsnorm_backward(T2(x, R, D), T1(w, D), T1(rstd, R), T2(r, R, D), Tensor(), T2(dx, R, D), T1(dw, D));
  EXPECT_TRUE(check_gradient("dx", x, dx, objective, 13));
  EXPECT_TRUE(check_gradient("dweight", w, dw, objective, 14));
}

TEST_F(OpsGradcheck, RopeInverseIsTheBackward) {
  const int64_t T = 33, Hh = 3, D = 62;
  Vec x = random_vector(T * Hh * D, 20), r = random_vector(T * Hh * D, 21);
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = int32_t(t < 14 ? t : 3 * t + 1000);
  Vec inv(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, float(2 * i) / float(D));

  // Forward then inverse restores the input.
  Vec y = x;
  ops->rope(T3(y, T, Hh, D), pos.data(), inv.data(), false);
  double moved = 0;
  for (size_t i = 0; i < x.size(); ++i) moved = std::max(moved, double(std::fabs(y[i] - x[i])));
  EXPECT_GT(moved, 0.1);  // it did rotate
  ops->rope(T3(y, T, Hh, D), pos.data(), inv.data(), true);
  EXPECT_TRUE(test::all_close(y, x, 0, 1e-6, "rope then inverse"));

  // d/dx sum(r * rope(x)) = rope_inverse(r).
  Vec out(T * Hh * D);
  auto objective = [&] {
    out = x;
    ops->rope(T3(out, T, Hh, D), pos.data(), inv.data(), false);
    return weighted_sum(r, out);
  };
  Vec dx = r;
  ops->rope(T3(dx, T, Hh, D), pos.data(), inv.data(), true);
  EXPECT_TRUE(check_gradient("dx", x, dx, objective, 22));
}

TEST_F(OpsGradcheck, AttentionGqaTwoDocuments) {
  const int64_t T = 33, Hq = 4, Hkv = 2, D = 16, split = 14;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<int32_t> ds(T);
  for (int64_t t = 0; t < T; ++t) ds[t] = int32_t(t < split ? 0 : split);
  Vec q = random_vector(T * Hq * D, 30, -2, 2), k = random_vector(T * Hkv * D, 31, -2, 2),
      v = random_vector(T * Hkv * D, 32), r = random_vector(T * Hq * D, 33);
  Vec out(T * Hq * D), lse(Hq * T);
  auto objective = [&] {
    ops->attention_forward(T3(q, T, Hq, D), T3(k, T, Hkv, D), T3(v, T, Hkv, D), ds.data(), scale,
                           T3(out, T, Hq, D), T2(lse, Hq, T));
    return weighted_sum(r, out);
  };
  objective();
  Vec dq(T * Hq * D), dk(T * Hkv * D), dv(T * Hkv * D);
  ops->attention_backward(T3(q, T, Hq, D), T3(k, T, Hkv, D), T3(v, T, Hkv, D), ds.data(), scale,
                          T3(out, T, Hq, D), T2(lse, Hq, T), T3(r, T, Hq, D), T3(dq, T, Hq, D),
                          T3(dk, T, Hkv, D), T3(dv, T, Hkv, D));
  GradCheck c;
  c.samples = 150;
  EXPECT_TRUE(check_gradient("dq", q, dq, objective, 34, c));
  EXPECT_TRUE(check_gradient("dk", k, dk, objective, 35, c));
  EXPECT_TRUE(check_gradient("dv", v, dv, objective, 36, c));
  // The last key of document 1 gets nothing from document 2's queries: its gradient is what
  // document 1 alone gives, checked above; the first key of document 2 must be nonzero.
  double first_key = 0;
  for (int64_t i = 0; i < Hkv * D; ++i) first_key += std::fabs(dk[split * Hkv * D + i]);
  EXPECT_GT(first_key, 0.0);
}

TEST_F(OpsGradcheck, LinearWithBias) {
  const int64_t T = 31, In = 33, Out = 127;
  Vec x = random_vector(T * In, 40), w = random_vector(Out * In, 41), b = random_vector(Out, 42),
      r = random_vector(T * Out, 43);
  Vec y(T * Out);
  auto objective = [&] {
    ops->linear_forward(T2(x, T, In), T2(w, Out, In), T1(b, Out), Tensor(), T2(y, T, Out));
    return weighted_sum(r, y);
  };
  Vec dx(T * In), dw(Out * In, 0.0f), db(Out, 0.0f);
  ops->linear_backward(T2(x, T, In), T2(w, Out, In), T2(r, T, Out), T2(dx, T, In), T2(dw, Out, In),
                       T1(db, Out), false);
  EXPECT_TRUE(check_gradient("dx", x, dx, objective, 44));
  EXPECT_TRUE(check_gradient("dw", w, dw, objective, 45));
  EXPECT_TRUE(check_gradient("dbias", b, db, objective, 46));
}

TEST_F(OpsGradcheck, LinearCrossEntropyWithIgnoredTargets) {
  const int64_t T = 33, V = 127, H = 31;
  const float grad_scale = 0.5f;
  Vec x = random_vector(T * H, 50, -2, 2), w = random_vector(V * H, 51);
  std::vector<int32_t> tg(T);
  for (int64_t t = 0; t < T; ++t) tg[t] = (t % 5 == 2) ? kIgnoreIndex : int32_t((t * 41 + 7) % V);
  auto objective = [&] {
    return grad_scale *
           ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), grad_scale, Tensor(), Tensor(), Tensor());
  };
  Vec dx(T * H), dw(V * H, 0.0f);
  ce_sum(*ops, T2(x, T, H), T2(w, V, H), tg.data(), grad_scale, T2(dx, T, H), T2(dw, V, H), Tensor());
  GradCheck c;
  c.samples = 150;
  EXPECT_TRUE(check_gradient("dx", x, dx, objective, 52, c));
  EXPECT_TRUE(check_gradient("dw", w, dw, objective, 53, c));
}

TEST_F(OpsGradcheck, Swiglu) {
  const int64_t T = 33, F = 127;
  Vec g = random_vector(T * F, 60, -4, 4), u = random_vector(T * F, 61), r = random_vector(T * F, 62);
  Vec out(T * F);
  auto objective = [&] {
    ops->swiglu_forward(T2(g, T, F), T2(u, T, F), T2(out, T, F));
    return weighted_sum(r, out);
  };
  Vec dg(T * F), du(T * F);
  ops->swiglu_backward(T2(g, T, F), T2(u, T, F), T2(r, T, F), T2(dg, T, F), T2(du, T, F), Tensor());
  EXPECT_TRUE(check_gradient("dgate", g, dg, objective, 63));
  EXPECT_TRUE(check_gradient("dup", u, du, objective, 64));
}

TEST_F(OpsGradcheck, EmbeddingWithRepeatedIds) {
  const int64_t V = 13, H = 31, T = 33;
  Vec table = random_vector(V * H, 70), r = random_vector(T * H, 71);
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = int32_t((t * t + 3) % 11);  // ids 11, 12 never used
  Vec out(T * H);
  auto objective = [&] {
    ops->embedding_forward(ids.data(), T2(table, V, H), T2(out, T, H));
    return weighted_sum(r, out);
  };
  Vec dtable(V * H, 0.0f);
  ops->embedding_backward(ids.data(), T2(r, T, H), T2(dtable, V, H));
  GradCheck c;
  c.samples = V * H;  // every element, including the unused rows whose gradient is 0
  EXPECT_TRUE(check_gradient("dtable", table, dtable, objective, 72, c));
}

}  // namespace
}  // namespace ferry
