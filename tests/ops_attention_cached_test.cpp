// The CPU reference of Ops::attention_cached against attention_forward, the training attention:
// the newest T queries over a cache of S keys give the last T rows of a causal attention over the
// S tokens, for S = T (a whole prompt) and T < S (decode steps), with GQA and plain heads.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "test_util.h"

namespace ferry {
namespace {

struct Case {
  int64_t T, S, Hq, Hkv, D;
};

TEST(AttentionCached, EqualsTheLastRowsOfCausalAttention) {
  auto ops = make_cpu_ops();
  const Case cases[] = {
      {1, 1, 2, 1, 8}, {1, 37, 4, 2, 16}, {5, 33, 4, 4, 32}, {31, 31, 6, 2, 64}, {3, 127, 8, 2, 128}};
  uint64_t seed = 40;
  for (const Case& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " S=" + std::to_string(c.S));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    std::vector<float> q = test::random_vector(c.S * c.Hq * c.D, seed++, -2.0f, 2.0f);
    std::vector<float> k = test::random_vector(c.S * c.Hkv * c.D, seed++, -2.0f, 2.0f);
    std::vector<float> v = test::random_vector(c.S * c.Hkv * c.D, seed++);
    std::vector<int32_t> doc_start(static_cast<size_t>(c.S), 0);
    std::vector<float> full(q.size()), lse(static_cast<size_t>(c.Hq * c.S));
    ops->attention_forward(Tensor::f32(q.data(), {c.S, c.Hq, c.D}), Tensor::f32(k.data(), {c.S, c.Hkv, c.D}),
                           Tensor::f32(v.data(), {c.S, c.Hkv, c.D}), AttentionMask(doc_start.data()), scale,
                           Tensor::f32(full.data(), {c.S, c.Hq, c.D}), Tensor::f32(lse.data(), {c.Hq, c.S}));
    const size_t first = static_cast<size_t>((c.S - c.T) * c.Hq * c.D);
    std::vector<float> out(static_cast<size_t>(c.T * c.Hq * c.D), NAN);
    ops->attention_cached(Tensor::f32(q.data() + first, {c.T, c.Hq, c.D}),
                          Tensor::f32(k.data(), {c.S, c.Hkv, c.D}), Tensor::f32(v.data(), {c.S, c.Hkv, c.D}),
                          scale, Tensor::f32(out.data(), {c.T, c.Hq, c.D}));
    const std::vector<float> expected(full.begin() + static_cast<std::ptrdiff_t>(first), full.end());
    EXPECT_TRUE(test::all_close(out, expected, 1e-5, 1e-6, "attention_cached"));
  }
}

}  // namespace
}  // namespace ferry
