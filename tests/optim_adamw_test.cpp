// AdamW against an independent double-precision implementation of torch.optim.AdamW's documented
// algorithm, plus hand-computed steps.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "optim/adamw.h"
#include "test_util.h"

namespace ferry {
namespace {

// torch.optim.AdamW's documented update, in double.
struct RefAdamW {
  std::vector<double> p, m, v;
  explicit RefAdamW(const std::vector<float>& init)
      : p(init.begin(), init.end()), m(init.size()), v(init.size()) {}
  void step(const std::vector<float>& grad, const AdamWHyper& h, int64_t t, bool decay, double scale = 1.0) {
    const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = static_cast<double>(grad[i]) * scale;
      if (decay) p[i] *= 1.0 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + h.eps;
      p[i] -= h.lr / bc1 * m[i] / denom;
    }
  }
};

std::vector<float> to_float(const std::vector<double>& x) {
  return std::vector<float>(x.begin(), x.end());
}

struct State {
  std::vector<float> p, m, v;
  explicit State(const std::vector<float>& init) : p(init), m(init.size(), 0.0f), v(init.size(), 0.0f) {}
  void step(const std::vector<float>& g, const AdamWHyper& h, int64_t t, bool decay, float scale = 1.0f) {
    adamw_step(p.data(), m.data(), v.data(), g.data(), p.size(), h, t, decay, scale);
  }
};

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void run_against_reference(size_t n, bool decay, double weight_decay) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " decay=" << decay << " wd=" << weight_decay);
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = weight_decay;
  const auto init = test::random_vector(n, 7 + n);
  State ours(init);
  RefAdamW ref(init);
  for (int64_t t = 1; t <= 5; ++t) {
    // Gradients of varying magnitude so that m and v are not proportional to one gradient.
    const auto g = test::random_vector(n, 100 * t + n, -0.5f * t, 0.5f * t);
    ours.step(g, h, t, decay);
    ref.step(g, h, t, decay);
  }
  // The fp32 arithmetic rounds ~10 operations per step; 1e-5 relative is fp32's tolerance (DESIGN §6.3).
  EXPECT_TRUE(test::all_close(ours.p, to_float(ref.p), 1e-5, 1e-6, "param"));
  EXPECT_TRUE(test::all_close(ours.m, to_float(ref.m), 1e-5, 1e-7, "exp_avg"));
  EXPECT_TRUE(test::all_close(ours.v, to_float(ref.v), 1e-5, 1e-9, "exp_avg_sq"));
}

TEST(AdamW, FiveStepsMatchDoubleReferenceWithoutDecay) {
  for (size_t n : {1, 31, 33, 127, 1000}) run_against_reference(n, false, 0.0);
}

TEST(AdamW, FiveStepsMatchDoubleReferenceWithDecay) {
  for (size_t n : {1, 31, 33, 127, 1000}) run_against_reference(n, true, 0.1);
}

TEST(AdamW, LargeTensorSplitOverThreadsMatchesReference) {
  // Large enough to be cut into pieces by the thread pool.
  run_against_reference(200003, true, 0.01);
}

TEST(AdamW, DecayFlagOffIgnoresWeightDecay) {
  AdamWHyper with_wd;
  with_wd.lr = 1e-3;
  with_wd.weight_decay = 0.5;
  AdamWHyper no_wd = with_wd;
  no_wd.weight_decay = 0.0;
  const auto init = test::random_vector(257, 1);
  State a(init), b(init), c(init);
  for (int64_t t = 1; t <= 3; ++t) {
    const auto g = test::random_vector(257, 10 + t);
    a.step(g, with_wd, t, /*decay=*/false);
    b.step(g, no_wd, t, /*decay=*/true);
    c.step(g, with_wd, t, /*decay=*/true);
  }
  EXPECT_TRUE(bit_equal(a.p, b.p));
  EXPECT_FALSE(bit_equal(a.p, c.p));
}

TEST(AdamW, DecoupledDecayShrinksParamBeforeTheAdamUpdate) {
  // With a zero gradient m and v stay 0, the Adam term is 0/(0+eps) = 0, and only p*(1 - lr*wd) remains.
  AdamWHyper h;
  h.lr = 0.1;
  h.weight_decay = 0.5;
  std::vector<float> p{2.0f, -4.0f}, m(2, 0.0f), v(2, 0.0f), g(2, 0.0f);
  adamw_step(p.data(), m.data(), v.data(), g.data(), 2, h, 1, true);
  EXPECT_EQ(p[0], 2.0f * static_cast<float>(1.0 - 0.1 * 0.5));
  EXPECT_EQ(p[1], -4.0f * static_cast<float>(1.0 - 0.1 * 0.5));
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(v[0], 0.0f);
}

TEST(AdamW, HandComputedFirstStep) {
  // Step 1 from zero state: m = (1-b1) g, v = (1-b2) g^2; bias correction turns them back into g and
  // g^2, so the update is lr * g / (|g| + eps): a step of lr in the direction of -sign(g).
  AdamWHyper h;
  h.lr = 1e-3;
  std::vector<float> g{0.5f, -2.0f, 1e-3f, 3.0f};
  std::vector<float> p{1.0f, 1.0f, 1.0f, -1.0f}, m(4, 0.0f), v(4, 0.0f);
  const std::vector<float> p0 = p;
  adamw_step(p.data(), m.data(), v.data(), g.data(), 4, h, 1, false);
  for (size_t i = 0; i < 4; ++i) {
    const double gi = g[i];
    EXPECT_NEAR(m[i], 0.1 * gi, 1e-7 * std::fabs(gi)) << i;
    EXPECT_NEAR(v[i], 0.001 * gi * gi, 1e-7 * gi * gi) << i;
    // sqrt(v)/sqrt(bc2) = sqrt(0.001 g^2)/sqrt(0.001) = |g|; eps = 1e-8 sits outside the sqrt.
    const double expected = p0[i] - 1e-3 * gi / (std::fabs(gi) + 1e-8);
    EXPECT_NEAR(p[i], expected, 1e-7) << i;
  }
}

TEST(AdamW, BiasCorrectionAtStepTenFromZeroState) {
  // The same zero state updated as if it were step 10: bc1 = 1 - 0.9^10, bc2 = 1 - 0.999^10, so the
  // step is lr/bc1 * 0.1 g / (sqrt(0.001) |g| / sqrt(bc2) + eps) — about 0.4844 lr, not lr.
  AdamWHyper h;
  h.lr = 1e-2;
  const float g = 0.25f;
  // Parameters start at 0 so that the result carries the step at full fp32 relative precision.
  float p1 = 0.0f, m1 = 0.0f, v1 = 0.0f;
  float p10 = 0.0f, m10 = 0.0f, v10 = 0.0f;
  adamw_step(&p1, &m1, &v1, &g, 1, h, 1, false);
  adamw_step(&p10, &m10, &v10, &g, 1, h, 10, false);
  const double bc1 = 1.0 - std::pow(0.9, 10), bc2 = 1.0 - std::pow(0.999, 10);
  const double step10 = 1e-2 / bc1 * (0.1 * g) / (std::sqrt(0.001 * g * g) / std::sqrt(bc2) + 1e-8);
  EXPECT_NEAR(-p1, 1e-2, 1e-2 * 1e-6);
  EXPECT_NEAR(-p10, step10, step10 * 1e-6);
  EXPECT_NEAR(step10 / 1e-2, 0.48443, 1e-5);
  // Moments do not depend on the step number.
  EXPECT_EQ(m1, m10);
  EXPECT_EQ(v1, v10);
}

TEST(AdamW, GradScaleMultipliesTheGradientFirst) {
  AdamWHyper h;
  h.lr = 3e-3;
  h.weight_decay = 0.1;
  const size_t n = 127;
  const auto init = test::random_vector(n, 5);
  const float scale = 0.37f;
  State scaled(init), prescaled(init);
  RefAdamW ref(init);
  for (int64_t t = 1; t <= 5; ++t) {
    const auto g = test::random_vector(n, 50 + t, -3.0f, 3.0f);
    std::vector<float> g_scaled(n);
    for (size_t i = 0; i < n; ++i) g_scaled[i] = g[i] * scale;  // torch: grads.mul_(clip_coef)
    scaled.step(g, h, t, true, scale);
    prescaled.step(g_scaled, h, t, true);
    ref.step(g, h, t, true, scale);
  }
  EXPECT_TRUE(bit_equal(scaled.p, prescaled.p));
  EXPECT_TRUE(bit_equal(scaled.m, prescaled.m));
  EXPECT_TRUE(bit_equal(scaled.v, prescaled.v));
  EXPECT_TRUE(test::all_close(scaled.p, to_float(ref.p), 1e-5, 1e-6, "param"));
}

TEST(AdamW, ResultDoesNotDependOnHowTheTensorIsSplit) {
  // One call over the whole buffer equals many calls over pieces, bit for bit: the parallel split
  // of adamw_step cannot change the result.
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.01;
  const size_t n = 100001;
  const auto init = test::random_vector(n, 9);
  State whole(init), pieces(init);
  for (int64_t t = 1; t <= 2; ++t) {
    const auto g = test::random_vector(n, 90 + t);
    whole.step(g, h, t, true);
    for (size_t b = 0; b < n; b += 1000) {
      const size_t len = std::min<size_t>(1000, n - b);
      adamw_step(pieces.p.data() + b, pieces.m.data() + b, pieces.v.data() + b, g.data() + b, len, h, t,
                 true);
    }
  }
  EXPECT_TRUE(bit_equal(whole.p, pieces.p));
  EXPECT_TRUE(bit_equal(whole.v, pieces.v));
}

TEST(AdamW, SmallBeta1UsesTheOtherLerpBranch) {
  // beta1 <= 0.5 makes torch's lerp weight >= 0.5 (the end - (end - self)(1 - w) form); still AdamW.
  AdamWHyper h;
  h.lr = 1e-2;
  h.beta1 = 0.3;
  const auto init = test::random_vector(64, 3);
  State ours(init);
  RefAdamW ref(init);
  for (int64_t t = 1; t <= 5; ++t) {
    const auto g = test::random_vector(64, 30 + t);
    ours.step(g, h, t, false);
    ref.step(g, h, t, false);
  }
  EXPECT_TRUE(test::all_close(ours.p, to_float(ref.p), 1e-5, 1e-6, "param"));
  EXPECT_TRUE(test::all_close(ours.m, to_float(ref.m), 1e-5, 1e-7, "exp_avg"));
}

TEST(AdamW, ValidatesHyperparametersLikeTorch) {
  AdamWHyper ok;
  ok.lr = 1e-3;
  EXPECT_NO_THROW(validate_adamw_hyper(ok));
  auto bad = [&](auto mutate, const char* needle) {
    AdamWHyper h = ok;
    mutate(h);
    try {
      validate_adamw_hyper(h);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad([](AdamWHyper& h) { h.lr = -1.0; }, "learning rate -1");
  bad([](AdamWHyper& h) { h.beta1 = 1.0; }, "beta1 1");
  bad([](AdamWHyper& h) { h.beta2 = -0.1; }, "beta2 -0.1");
  bad([](AdamWHyper& h) { h.eps = -1e-8; }, "eps");
  bad([](AdamWHyper& h) { h.weight_decay = -0.1; }, "weight_decay");
  bad([](AdamWHyper& h) { h.lr = std::nan(""); }, "learning rate");
}

}  // namespace
}  // namespace ferry
