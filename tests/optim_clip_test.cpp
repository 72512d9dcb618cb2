// Global gradient norm and torch.nn.utils.clip_grad_norm_'s clipping coefficient.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "optim/clip.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(GradNorm, ThreeFourTwelveIsThirteen) {
  const std::vector<float> a{3.0f}, b{4.0f, 0.0f}, c{-12.0f};
  EXPECT_EQ(global_grad_norm({{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}}), 13.0);
  EXPECT_EQ(global_grad_norm({}), 0.0);
}

TEST(GradNorm, MatchesANaiveSumAndIgnoresTheTensorSplit) {
  const size_t n = 300007;  // several reduction chunks
  const auto g = test::random_vector(n, 11);
  long double naive = 0;
  for (float x : g) naive += static_cast<long double>(x) * x;
  const double whole = global_grad_norm({{g.data(), n}});
  EXPECT_NEAR(whole, std::sqrt(static_cast<double>(naive)), 1e-12 * whole);
  // Chunks are cut per tensor, so a different split may differ in the last bits, but not more.
  const double split = global_grad_norm({{g.data(), 1000}, {g.data() + 1000, n - 1000}});
  EXPECT_NEAR(split, whole, 1e-12 * whole);
  // The same input gives the same bits every time.
  EXPECT_EQ(global_grad_norm({{g.data(), n}}), whole);
}

TEST(GradNorm, Bf16PartialsEqualThoseOfTheWidenedGradients) {
  const size_t n = 200003;
  const auto g = test::random_vector(n, 12);
  std::vector<uint16_t> bf16(n);
  std::vector<float> widened(n);
  for (size_t i = 0; i < n; ++i) {
    bf16[i] = f32_to_bf16(g[i]);
    widened[i] = bf16_to_f32(bf16[i]);
  }
  const std::vector<GradSpan> spans{{bf16.data(), 1000, DType::BF16},
                                    {bf16.data() + 1000, n - 1000, DType::BF16}};
  const std::vector<double> ours = grad_sumsq_partials(std::span<const GradSpan>(spans));
  const std::vector<double> want =
      grad_sumsq_partials({{widened.data(), 1000}, {widened.data() + 1000, n - 1000}});
  ASSERT_EQ(ours.size(), want.size());
  for (size_t k = 0; k < ours.size(); ++k) EXPECT_EQ(ours[k], want[k]) << "chunk " << k;
}

// The order inside a chunk is part of the contract (the GPU's partials reproduce it bit for bit):
// column i % 128 accumulates element i, rows in order; columns 4j..4j+3 pair as (a0 + a1) + (a2 + a3);
// the 32 results fold in halves. Written out here from that description, and checked on a full
// chunk and on a ragged last chunk.
TEST(GradNorm, ChunkPartialsFollowTheDocumentedColumnOrder) {
  const size_t n = kGradNormChunk + 1000 + 37;  // a full chunk, then one that ends mid-row
  auto g = test::random_vector(n, 13);
  for (size_t i = 0; i < n; i += 97) g[i] *= 1e4f;  // magnitudes far apart, so order shows in the bits
  auto documented = [&](size_t begin, size_t count) {
    double col[kGradNormColumns] = {};
    for (size_t i = 0; i < count; ++i) {
      const double x = g[begin + i];
      col[i % kGradNormColumns] += x * x;
    }
    double lane[kGradNormColumns / 4];
    for (size_t j = 0; j < kGradNormColumns / 4; ++j)
      lane[j] = (col[4 * j] + col[4 * j + 1]) + (col[4 * j + 2] + col[4 * j + 3]);
    for (size_t half = 16; half > 0; half /= 2)
      for (size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
    return lane[0];
  };
  const std::vector<double> partials = grad_sumsq_partials({{g.data(), n}});
  ASSERT_EQ(partials.size(), 2u);
  EXPECT_EQ(partials[0], documented(0, kGradNormChunk));
  EXPECT_EQ(partials[1], documented(kGradNormChunk, n - kGradNormChunk));
  // And a sequential sum gives different bits on this data, so the check above can fail.
  double sequential = 0;
  for (size_t i = 0; i < kGradNormChunk; ++i) sequential += static_cast<double>(g[i]) * g[i];
  EXPECT_NE(partials[0], sequential);
}

TEST(ClipCoefficient, ClampsToOne) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0f);
  // max_norm / (norm + 1e-6): 1 / (13 + 1e-6) in fp32, as torch computes it.
  const float expected = (1.0f / (13.0f + static_cast<float>(1e-6))) * 1.0f;
  EXPECT_EQ(clip_coefficient(13.0, 1.0), expected);
  EXPECT_NEAR(clip_coefficient(13.0, 1.0), 1.0 / 13.0, 1e-7);
  EXPECT_NEAR(clip_coefficient(4.0, 2.0), 0.5, 1e-6);
  // Just above max_norm still clips (the 1e-6 is below fp32's resolution at 1.0, so the coefficient
  // rounds to exactly 1 or less).
  EXPECT_LE(clip_coefficient(1.0000001, 1.0), 1.0f);
}

TEST(ClipCoefficient, NonPositiveMaxNormMeansNoClipping) {
  EXPECT_EQ(clip_coefficient(100.0, 0.0), 1.0f);
  EXPECT_EQ(clip_coefficient(100.0, -1.0), 1.0f);
}

TEST(ClipCoefficient, NonFiniteNormsBehaveAsInTorch) {
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0f);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nan(""), 1.0)));
}

}  // namespace
}  // namespace ferry
