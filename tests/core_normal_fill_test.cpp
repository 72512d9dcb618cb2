// The weights' normal random numbers (core/normal_fill.h): its logarithm and sine/cosine against
// libm's, the values against the standard normal distribution, pieces and threads against one fill
// in order, and a few values pinned so that a preset's weights cannot change unnoticed.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/normal_fill.h"

namespace ferry {
namespace {

// A fixed sequence of 64-bit test inputs (not the generator under test).
uint64_t next_input(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state;
}

TEST(NormalFill, LogarithmIsLibmsWithinTwoUlpsOverTheUniformsItTakes) {
  uint64_t state = 1;
  std::vector<uint64_t> ns = {1, 2, 3, uint64_t{1} << 51, (uint64_t{1} << 52) - 1, uint64_t{1} << 52};
  for (int i = 0; i < 200000; ++i) ns.push_back((next_input(state) >> 12) + 1);
  // Near 1, where -2 ln u is the radius of the smallest values: every relative digit counts.
  for (uint64_t k = 1; k < 2000; ++k) ns.push_back((uint64_t{1} << 52) - k * k * 1237);
  for (uint64_t n : ns) {
    const double u = static_cast<double>(n) * 0x1.0p-52;
    const double mine = normal_fill_log(u), ref = std::log(u);
    if (n == uint64_t{1} << 52) {
      EXPECT_EQ(mine, 0.0);
      continue;
    }
    const double ulp = std::nextafter(std::abs(ref), INFINITY) - std::abs(ref);
    ASSERT_LE(std::abs(mine - ref), 2 * ulp) << "u = " << u << ": " << mine << " vs " << ref;
  }
}

TEST(NormalFill, SineAndCosineOfTurnsAreLibmsWithinTheAnglesRounding) {
  uint64_t state = 2;
  std::vector<uint64_t> bs = {
      0, 1, uint64_t{1} << 50, uint64_t{1} << 51, 3 * (uint64_t{1} << 51), (uint64_t{1} << 53) - 1};
  for (int i = 0; i < 200000; ++i) bs.push_back(next_input(state) >> 11);
  for (uint64_t b : bs) {
    const double t = static_cast<double>(b) * 0x1.0p-53;
    double c = 0, s = 0;
    normal_fill_sincos_turns(t, c, s);
    // libm's argument 2 pi t is rounded once (half an ulp of up to 2 pi, 4.4e-16), which moves its
    // results by up to that much; the series and rotation add a few units of 1e-16.
    ASSERT_NEAR(c, std::cos(2 * M_PI * t), 1.2e-15) << "t = " << t;
    ASSERT_NEAR(s, std::sin(2 * M_PI * t), 1.2e-15) << "t = " << t;
    ASSERT_NEAR(c * c + s * s, 1.0, 9e-16) << "t = " << t;
  }
  // The quarter turns are exact.
  double c = 0, s = 0;
  normal_fill_sincos_turns(0.25, c, s);
  EXPECT_EQ(std::abs(c), 0.0);
  EXPECT_EQ(s, 1.0);
  normal_fill_sincos_turns(0.5, c, s);
  EXPECT_EQ(c, -1.0);
  EXPECT_EQ(std::abs(s), 0.0);
  normal_fill_sincos_turns(0.75, c, s);
  EXPECT_EQ(std::abs(c), 0.0);
  EXPECT_EQ(s, -1.0);
}

// The standard normal CDF.
double phi(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

TEST(NormalFill, ValuesFollowTheStandardNormal) {
  const int64_t n = int64_t{1} << 22;
  std::vector<float> x(n);
  fill_normal(x.data(), n, 12345, 1.0f);
  double sum = 0, sum2 = 0, sum4 = 0, pair_product = 0, lag_product = 0, largest = 0;
  int64_t beyond2 = 0, beyond3 = 0, beyond4 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    sum += v, sum2 += v * v, sum4 += v * v * v * v;
    largest = std::max(largest, std::abs(v));
    beyond2 += std::abs(v) > 2, beyond3 += std::abs(v) > 3, beyond4 += std::abs(v) > 4;
    if (i % 2 == 1) pair_product += v * x[i - 1];  // the two values of one Box-Muller pair
    if (i >= 2) lag_product += v * x[i - 2];       // neighbouring pairs
  }
  const double sd_mean = 1 / std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(sum / n, 0.0, 5 * sd_mean);
  EXPECT_NEAR(sum2 / n, 1.0, 5 * std::sqrt(2.0) * sd_mean);   // var(z^2) = 2
  EXPECT_NEAR(sum4 / n, 3.0, 5 * std::sqrt(96.0) * sd_mean);  // E z^4 = 3, var(z^4) = 96
  EXPECT_NEAR(pair_product / (n / 2), 0.0, 5 * std::sqrt(2.0) * sd_mean);
  EXPECT_NEAR(lag_product / (n - 2), 0.0, 5 * sd_mean);
  // Tail counts within 5 standard deviations of their binomial expectations.
  const auto expect_tail = [&](int64_t count, double z) {
    const double p = 2 * (1 - phi(z)), mean = p * n;
    EXPECT_NEAR(static_cast<double>(count), mean, 5 * std::sqrt(mean * (1 - p))) << "|z| > " << z;
  };
  expect_tail(beyond2, 2), expect_tail(beyond3, 3), expect_tail(beyond4, 4);
  EXPECT_GT(largest, 4.5);  // the tails are there: 4M draws reach ~5 sigma
  EXPECT_LT(largest, 8.6);  // sqrt(-2 ln 2^-52): the largest radius a 52-bit uniform gives

  // Kolmogorov-Smirnov distance of the sorted values to phi: the 0.1% critical value is 1.95/sqrt(n).
  std::sort(x.begin(), x.end());
  double d = 0;
  for (int64_t i = 0; i < n; i += 7) {
    const double f = phi(x[i]);
    d = std::max({d, std::abs(f - static_cast<double>(i) / n), std::abs(f - static_cast<double>(i + 1) / n)});
  }
  EXPECT_LT(d, 1.95 * sd_mean);
}

TEST(NormalFill, PiecesAndThreadsGiveTheValuesOfOneFillInOrder) {
  const int64_t n = 100003;  // odd: the last pair gives one value
  std::vector<float> whole(n), pieces(n, -1.0f);
  fill_normal(whole.data(), n, 99, 0.02f);
  // Pieces out of order and on several threads, starting at the first or the second value of a pair.
  const std::vector<int64_t> starts = {0, 1, 514, 1001, 1002, 4096, 50000, 77779, 100002};
  std::vector<std::thread> threads;
  for (size_t k = starts.size(); k-- > 0;) {
    const int64_t at = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : n;
    threads.emplace_back([&, at, end] { fill_normal(pieces.data() + at, end - at, 99, 0.02f, at); });
  }
  for (auto& t : threads) t.join();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(pieces[i]), std::bit_cast<uint32_t>(whole[i])) << "value " << i;
  // A value is its stream's double, rounded to float once and scaled.
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{77}, n - 1})
    EXPECT_EQ(whole[i], 0.02f * static_cast<float>(normal_value(99, i))) << "value " << i;
  // Another key is another stream.
  std::vector<float> other(n);
  fill_normal(other.data(), n, 100, 0.02f);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += other[i] == whole[i];
  EXPECT_LT(same, 10);
}

// The presets key a parameter's stream by seed * 0x9E3779B97F4A7C15 + its index: keys an increment
// of the counter apart, or one apart, are streams of their own, not one stream shifted.
TEST(NormalFill, NearbyKeysAreOtherStreams) {
  const int64_t n = 4096;
  const uint64_t key = 42 * 0x9E3779B97F4A7C15ull + 3;
  std::vector<float> a(n + 2), b(n), c(n);
  fill_normal(a.data(), n + 2, key, 1.0f);
  fill_normal(b.data(), n, key + 0x9E3779B97F4A7C15ull, 1.0f);  // the next seed's
  fill_normal(c.data(), n, key + 1, 1.0f);                      // the next parameter's
  for (int64_t shift : {0, 1, 2}) {
    int64_t same_b = 0, same_c = 0;
    for (int64_t i = 0; i < n; ++i) same_b += b[i] == a[i + shift], same_c += c[i] == a[i + shift];
    EXPECT_LT(same_b, 4) << "shift " << shift;
    EXPECT_LT(same_c, 4) << "shift " << shift;
  }
}

// The values of a stream are part of what a preset's weights are: the same on every machine and
// build (IEEE arithmetic alone, no FMA contraction, no libm). Changing the generator changes every
// preset's weights; these pins say so.
TEST(NormalFill, PinnedValuesAreTheSameOnEveryMachine) {
  const std::vector<std::pair<int64_t, uint64_t>> pinned = {{0, 0x3fe160aff4346229ull},
                                                            {1, 0x3feb85b6205d3200ull},
                                                            {2, 0x3ffceecb24eab8bfull},
                                                            {3, 0x3fe202e14c62e82full},
                                                            {1000001, 0xbfbb5f10625dd75bull}};
  for (const auto& [i, bits] : pinned)
    EXPECT_EQ(std::bit_cast<uint64_t>(normal_value(42, i)), bits)
        << "value " << i << " = " << normal_value(42, i) << ", bits 0x" << std::hex
        << std::bit_cast<uint64_t>(normal_value(42, i));
  // And through fill_normal's vectorised loop: the same bits as one value at a time.
  std::vector<float> x(1000002);
  fill_normal(x.data(), static_cast<int64_t>(x.size()), 42, 1.0f);
  for (const auto& [i, bits] : pinned) EXPECT_EQ(x[i], static_cast<float>(std::bit_cast<double>(bits)));
}

}  // namespace
}  // namespace ferry
