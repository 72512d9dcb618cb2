// The vectorisable math the CPU ops build on: exp within 1 ulp, its edges (underflow to 0, clamp,
// NaN kept), and the fixed-lane max and double sum.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/cpu/vec_math.h"
#include "test_util.h"

namespace ferry::cpu {
namespace {

int64_t ulp_distance(float a, float b) {
  return std::abs(int64_t{std::bit_cast<int32_t>(a)} - int64_t{std::bit_cast<int32_t>(b)});
}

TEST(OpsVecMath, ExpIsWithinOneUlpOverItsRange) {
  std::vector<float> x;
  for (float v = -87.3f; v <= 88.3f; v += 0.00731f) x.push_back(v);
  const std::vector<float> small = test::random_vector(200000, 1, -0.75f, 0.75f);  // around k = 0, -1, 1
  x.insert(x.end(), small.begin(), small.end());
  x.push_back(0.0f);
  x.push_back(-0.0f);
  std::vector<float> y = x;
  exp_inplace(y.data(), static_cast<int64_t>(y.size()));
  int64_t worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t d = ulp_distance(y[i], static_cast<float>(std::exp(static_cast<double>(x[i]))));
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, 1) << "at x = " << x[at] << ": " << y[at] << " vs " << std::exp(double(x[at]));
  EXPECT_EQ(y[y.size() - 1], 1.0f);
  EXPECT_EQ(y[y.size() - 2], 1.0f);
}

TEST(OpsVecMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1000.0f, -87.4f, 100.0f, inf, nan, -nan};
  exp_inplace(x.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 0.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_TRUE(std::isfinite(x[3]));
  const double top = std::exp(double(88.3f));
  EXPECT_NEAR(x[3], top, top * 1e-6);  // clamped, not inf
  EXPECT_TRUE(std::isfinite(x[4]));
  EXPECT_TRUE(std::isnan(x[5]));  // NaN never turns into a number
  EXPECT_TRUE(std::isnan(x[6]));
}

TEST(OpsVecMath, MaxAndSumAtAwkwardLengths) {
  for (int64_t n : {1, 7, 8, 9, 31, 33, 127, 1000}) {
    std::vector<float> x = test::random_vector(n, 5 + n, -3.0f, 3.0f);
    float m = x[0];
    double s = 0;
    for (float v : x) {
      m = std::max(m, v);
      s += v;
    }
    EXPECT_EQ(max_of(x.data(), n), m) << n;
    EXPECT_NEAR(sum_of(x.data(), n), s, 1e-12 * n) << n;
  }
}

}  // namespace
}  // namespace ferry::cpu
