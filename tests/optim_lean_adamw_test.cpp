// The lean optimizer state formats (optim/state_format.h, optim/lean_adamw.h) against scalar
// references: their byte sizes, the compensated master against fp64 over 1000 updates, stochastic
// rounding's mean, the 8-bit moments' round trip, and the whole lean AdamW against fp64 AdamW.
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "optim/adamw_scalars.h"
#include "optim/lean_adamw.h"
#include "optim/lean_kernel.h"
#include "optim/state_format.h"
#include "test_util.h"

namespace ferry {
namespace {

double bf16_ulp(float x) {
  const uint16_t hi = f32_to_bf16(x);
  const int e = std::max((hi >> 7) & 0xff, 1);
  return std::ldexp(1.0, e - 127 - 7);
}

TEST(StateFormat, BytesPerParamOfEachFormat) {
  EXPECT_EQ(state_bytes_per_param(OptimizerStateFormat::Fp32), 12.0);
  EXPECT_EQ(state_bytes_per_param(OptimizerStateFormat::Fp32Q8), 6.125);
  EXPECT_EQ(state_bytes_per_param(OptimizerStateFormat::Bf16C8Q8), 5.125);
  EXPECT_EQ(state_bytes_per_param(OptimizerStateFormat::Bf16SrQ8), 4.125);
  EXPECT_EQ(adamw_traffic_bytes_per_param(OptimizerStateFormat::Fp32), 26.0);
  // A unit of 100 elements: 2 blocks of scales per moment.
  EXPECT_EQ(state_bytes(OptimizerStateFormat::Fp32, 100), 1200u);
  EXPECT_EQ(state_bytes(OptimizerStateFormat::Bf16SrQ8, 100), 200u + 100 + 100 + 2 * 8);
  EXPECT_EQ(state_bytes(OptimizerStateFormat::Bf16C8Q8, 100), 300u + 200 + 16);
  for (const char* name : {"fp32", "fp32_q8", "bf16c8_q8", "bf16sr_q8"}) {
    OptimizerStateFormat f;
    ASSERT_TRUE(parse_state_format(name, &f)) << name;
    EXPECT_STREQ(state_format_name(f), name);
  }
  OptimizerStateFormat f;
  EXPECT_FALSE(parse_state_format("bf16", &f));
}

TEST(LeanAdamW, CompensatedRoundTripHasSixteenBitSignificand) {
  const auto x = test::random_vector(100000, 3, -10.0f, 10.0f);
  for (float value : x) {
    uint16_t hi;
    int8_t c;
    lean::encode_compensated(value, &hi, &c, 0.5f);
    const double err = std::fabs(static_cast<double>(lean::decode_compensated(hi, c)) - value);
    ASSERT_LE(err, bf16_ulp(value) / 256.0) << value;
  }
}

// Parameters that receive 1000 small updates (1e-4 of their size, under half a bf16 ulp, 2^-9):
// bf16 with nearest rounding loses them all; the compensated master, its compensation rounded
// stochastically, follows the fp64 sum in a random walk of steps under ulp/256 (standard deviation
// about 0.41 units per step at most, 13 over 1000 steps): over 4096 parameters the worst stays
// within 6 standard deviations, 77/256 ulp: the bound 0.3 ulp.
TEST(LeanAdamW, CompensatedMasterTracksFp64Over1000Updates) {
  const size_t n = 4096;
  const auto init = test::random_vector(n, 11, 0.5f, 2.0f);
  const auto dir = test::random_vector(n, 12, -1.0f, 1.0f);
  double worst = 0.0, worst_bf16 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double exact = init[i];
    uint16_t hi;
    int8_t c;
    lean::encode_compensated(init[i], &hi, &c, 0.5f);
    uint16_t plain = f32_to_bf16(init[i]);
    for (int t = 0; t < 1000; ++t) {
      const float d = 1e-4f * init[i] * dir[i];
      exact += static_cast<double>(d);
      lean::encode_compensated(lean::decode_compensated(hi, c) + d, &hi, &c, lean::uniform(4, t, i, 0));
      plain = f32_to_bf16(bf16_to_f32(plain) + d);
    }
    const double ulp = bf16_ulp(static_cast<float>(exact));
    worst = std::max(worst, std::fabs(lean::decode_compensated(hi, c) - exact) / ulp);
    worst_bf16 = std::max(worst_bf16, std::fabs(bf16_to_f32(plain) - exact) / ulp);
  }
  EXPECT_LE(worst, 0.3);
  EXPECT_GT(worst_bf16, 10.0 * worst);  // what the compensation is for
}

TEST(LeanAdamW, StochasticRoundingIsUnbiased) {
  // One value between two bf16 neighbours, rounded with 200000 different random draws: the mean is
  // the value within 5 standard errors (the two outcomes are one ulp apart: sigma <= ulp / 2).
  for (float x : {1.0f + 0.3f * 0x1p-7f, -3.7e-3f, 1234.567f}) {
    const size_t trials = 200000;
    double sum = 0.0;
    for (size_t k = 0; k < trials; ++k)
      sum += bf16_to_f32(lean::bf16_stochastic(x, lean::random16(7, 1, k, 0)));
    const double sigma = bf16_ulp(x) / 2.0 / std::sqrt(static_cast<double>(trials));
    EXPECT_NEAR(sum / trials, x, 5.0 * sigma) << x;
  }
  // Exact values are kept.
  EXPECT_EQ(lean::bf16_stochastic(1.5f, 0xffff), f32_to_bf16(1.5f));
}

TEST(LeanAdamW, StochasticRoundingAccumulatesUpdatesBelowHalfAnUlp) {
  // 1000 updates of 1e-4 relative (a quarter of bf16's half ulp at 1.0): nearest rounding keeps
  // 1.0; stochastic rounding's mean over 4096 parameters reaches the fp64 sum within 1%.
  const size_t n = 4096;
  double mean = 0.0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t p = f32_to_bf16(1.0f);
    for (int t = 1; t <= 1000; ++t)
      p = lean::bf16_stochastic(bf16_to_f32(p) + 1e-4f, lean::random16(9, t, i, 0));
    mean += bf16_to_f32(p);
  }
  mean /= n;
  EXPECT_NEAR(mean - 1.0, 0.1, 0.001);
}

TEST(LeanAdamW, EightBitMomentsRoundTrip) {
  const size_t n = kStateBlock;
  auto m = test::random_vector(n, 21, -1e-3f, 1e-3f);
  auto v = test::random_vector(n, 22, 0.0f, 1.0f);
  for (float& x : v) x = x * x * x * x * 1e-6f;  // a wide range: 1e-6 down to ~1e-12 and below
  v[5] = 1e-20f;                                 // far below the block's resolution, still nonzero
  v[6] = 0.0f;
  const auto u = test::random_vector(n, 23, 0.0f, 1.0f);
  int8_t qm[kStateBlock];
  uint8_t qv[kStateBlock];
  const float sm = lean::quantize_m(m.data(), n, u.data(), qm);
  const float sv = lean::quantize_v(v.data(), n, u.data(), qv);
  for (size_t i = 0; i < n; ++i) {
    // One code step at most: 2^-3 (m) or 2^-4 (sqrt(v)) of the value, or the smallest code (2^-15
    // of the block's scale) below it.
    EXPECT_LE(std::fabs(lean::dequantize_m(qm[i], sm) - m[i]), std::fabs(m[i]) / 8 + sm * 0x1.2p-15f) << i;
    EXPECT_LE(std::fabs(std::sqrt(lean::dequantize_v(qv[i], sv)) - std::sqrt(v[i])),
              std::sqrt(v[i]) / 16 + sv * 0x1.1p-15f)
        << i;
    if (v[i] > 0.0f) {
      EXPECT_GT(lean::dequantize_v(qv[i], sv), 0.0f) << "a nonzero v read as zero at " << i;
    }
  }
  EXPECT_EQ(qv[6], 0);
  // Unbiased: one m value quantized with many draws averages to itself.
  const float mm[2] = {1.0f, 0.3337f};
  double sum = 0.0;
  const size_t trials = 100000;
  for (size_t k = 0; k < trials; ++k) {
    const float uu[2] = {0.0f, lean::uniform(5, 1, k, 1)};
    int8_t q[2];
    const float s = lean::quantize_m(mm, 2, uu, q);
    sum += lean::dequantize_m(q[1], s);
  }
  EXPECT_NEAR(sum / trials, mm[1], 5.0 * (0.25 / 8) / 2.0 / std::sqrt(double(trials)));
}

// A unit's lean state in plain vectors (state_arrays order).
struct LeanBuffers {
  std::vector<std::vector<char>> arrays;
  LeanUnitState view;
  LeanBuffers(OptimizerStateFormat format, size_t n, uint64_t seed) {
    std::vector<void*> bases;
    for (const StateArraySpec& a : state_arrays(format)) {
      arrays.emplace_back(state_array_bytes(a.kind, n), 0);
      bases.push_back(arrays.back().data());
    }
    view = lean_unit_view(format, n, bases, seed);
  }
  std::vector<float> masters() const {
    std::vector<float> out(view.numel);
    lean_read_masters(view, out.data(), 0, view.numel);
    return out;
  }
};

// torch.optim.AdamW's documented update in double.
struct RefAdamW {
  std::vector<double> p, m, v;
  explicit RefAdamW(const std::vector<float>& init)
      : p(init.begin(), init.end()), m(init.size()), v(init.size()) {}
  void step(const std::vector<float>& grad, const AdamWHyper& h, int64_t t) {
    const double bc1 = 1.0 - std::pow(h.beta1, double(t)), bc2 = 1.0 - std::pow(h.beta2, double(t));
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i];
      p[i] *= 1.0 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
      p[i] -= h.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps);
    }
  }
};

// 300 steps of each lean format against fp64 AdamW, on gradients of random size in every step,
// half of the elements 1000 times smaller than their neighbours (of the same quantization block).
// The parameters move by ~lr per step (0.25 on average in all). The mean movement is fp64's within
// 1% (no bias); one element's error is bounded by the moments' rounding at every step (half a code
// step: 6% of m, 3% of sqrt(v); measured 0.046, bound 0.06) plus, for bf16sr, the random walk of
// its stochastic rounding (steps of at most ulp(2)/2 = 2^-8: sigma <= sqrt(300) * 2^-9 = 0.034 in
// 300 steps; bound 0.06 + 6 sigma = 0.26).
TEST(LeanAdamW, EachFormatTracksFp64AdamW) {
  const size_t n = 1000;
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.01;
  const auto init = test::random_vector(n, 31, -1.0f, 1.0f);
  const AdamWSegment all{0, n, true};
  for (auto format :
       {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8}) {
    SCOPED_TRACE(state_format_name(format));
    LeanBuffers s(format, n, 77);
    lean_write_masters(s.view, init.data(), 0, n);
    RefAdamW ref(s.masters());
    for (int64_t t = 1; t <= 300; ++t) {
      auto g = test::random_vector(n, 1000 + t, 0.1f, 1.0f);
      for (size_t i = 0; i < n; ++i) g[i] *= (i % 2 ? 1.0f : -1e-3f) * (1.0f + 0.5f * std::sin(0.1f * t));
      lean_adamw_step(s.view, {&all, 1}, g.data(), DType::F32, nullptr, h, t, 1.0f);
      ref.step(g, h, t);
    }
    const auto p = s.masters();
    double worst = 0.0, moved = 0.0, moved_ref = 0.0;
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(p[i] - ref.p[i]));
      moved += std::fabs(p[i] - init[i]);
      moved_ref += std::fabs(ref.p[i] - init[i]);
    }
    // No bias: the mean movement is fp64's within 1%.
    EXPECT_NEAR(moved / moved_ref, 1.0, 0.01);
    EXPECT_LE(worst, format == OptimizerStateFormat::Bf16SrQ8 ? 0.26 : 0.06);
  }
}

// The scalar reference of the block kernel (optim/lean_kernel.cpp): one element at a time through
// the scalar encoders of lean_adamw.h, adamw.cpp's operations in between. Elements outside every
// segment keep master and bf16 copy and have their moments re-encoded as the kernel does.
void reference_step(const LeanUnitState& s, std::span<const AdamWSegment> segments,
                    const std::vector<float>& grad, std::vector<uint16_t>* bf16_out, const AdamWHyper& hyper,
                    int64_t step, float grad_scale) {
  const AdamWScalars sc = adamw_scalars(hyper, step);
  const bool small_lerp = sc.lerp_weight < 0.5f;
  const float lerp_coef = small_lerp ? sc.lerp_weight : sc.lerp_weight - 1.0f;
  for (size_t b = 0; b < s.numel; b += kStateBlock) {
    const size_t block = b / kStateBlock, count = std::min(kStateBlock, s.numel - b);
    float m[kStateBlock], v[kStateBlock], um[kStateBlock], uv[kStateBlock];
    for (size_t j = 0; j < count; ++j) {
      const size_t i = b + j;
      m[j] = lean::dequantize_m(s.m_q[i], s.m_scale[block]);
      v[j] = lean::dequantize_v(s.v_q[i], s.v_scale[block]);
      um[j] = 0.5f;
      uv[j] = lean::uniform(s.seed, step, i, 1);
      const AdamWSegment* seg = nullptr;
      for (const AdamWSegment& x : segments)
        if (x.offset <= i && i < x.offset + x.count) seg = &x;
      if (seg == nullptr) continue;
      const float g = grad[i] * grad_scale;
      float before;
      lean_read_masters(s, &before, i, i + 1);
      float p = before * (seg->decay ? sc.decay_factor : 1.0f);
      const float m_new = std::fma(lerp_coef, g - m[j], small_lerp ? m[j] : g);
      const float vi = std::fma(sc.one_minus_beta2 * g, g, v[j] * sc.beta2);
      const float denom = std::sqrt(vi) * (1.0f / sc.bc2_sqrt) + sc.eps;
      p = p + sc.neg_step_size * m_new / denom;
      m[j] = m_new;
      v[j] = vi;
      switch (s.format) {
        case OptimizerStateFormat::Fp32Q8:
          s.master[i] = p;
          break;
        case OptimizerStateFormat::Bf16C8Q8:
          lean::encode_compensated(p, &s.master_bf16[i], &s.compensation[i],
                                   lean::uniform(s.seed, step, i, 0));
          break;
        default:
          s.master_bf16[i] = lean::bf16_stochastic(p, lean::random16(s.seed, step, i, 0));
      }
      if (bf16_out != nullptr) {
        float stored;
        lean_read_masters(s, &stored, i, i + 1);
        (*bf16_out)[i] = f32_to_bf16(stored);
      }
    }
    s.m_scale[block] = lean::quantize_m(m, count, um, s.m_q + b);
    s.v_scale[block] = lean::quantize_v(v, count, uv, s.v_q + b);
  }
}

// Highway's targets masked down to each instruction set the lean block kernel is compiled for
// (optim/lean_kernel.h block_kernel): AVX-512, AVX2, the baseline, as far as the CPU has them.
std::vector<int64_t> kernel_target_masks() {
  const int64_t all = hwy::SupportedTargets();
  return {all, all & ~(HWY_AVX3 | HWY_AVX3_DL), all & ~(HWY_AVX3 | HWY_AVX3_DL | HWY_AVX2)};
}

// Runs the kernel of one mask while it lives.
struct KernelTarget {
  explicit KernelTarget(int64_t mask) { hwy::SetSupportedTargetsForTest(mask); }
  ~KernelTarget() { hwy::SetSupportedTargetsForTest(0); }
  KernelTarget(const KernelTarget&) = delete;
  KernelTarget& operator=(const KernelTarget&) = delete;
};

// The vectorized kernel, for every instruction set, gives the scalar reference's bits: every array
// and the bf16 copy, over
// steps with segments that start and end inside blocks, a gap, a partial last block, bf16
// gradients in the copy's own buffer, and values that reach the encoders' edges (zeros, tiny and
// huge elements next to ordinary ones).
TEST(LeanAdamW, KernelMatchesScalarReferenceBitForBit) {
  const size_t n = 40 * kStateBlock + 23;
  AdamWHyper h;
  h.lr = 3e-3;
  h.weight_decay = 0.1;
  auto init = test::random_vector(n, 81, -2.0f, 2.0f);
  for (size_t i = 0; i < n; i += 37) init[i] = 0.0f;
  for (size_t i = 5; i < n; i += 41) init[i] *= 1e-30f;
  for (size_t i = 9; i < n; i += 53) init[i] *= 1e20f;
  const AdamWSegment segments[3] = {{3, 500, true}, {503, 1000, false}, {1600, n - 1600, true}};
  for (const int64_t mask : kernel_target_masks())
    for (auto format :
         {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8}) {
      const KernelTarget target(mask);
      SCOPED_TRACE(std::string(state_format_name(format)) + " on " + lean::block_kernel_target());
      LeanBuffers fast(format, n, 13), ref(format, n, 13);
      lean_write_masters(fast.view, init.data(), 0, n);
      lean_write_masters(ref.view, init.data(), 0, n);
      std::vector<uint16_t> out_ref(n, 0x1234);
      std::vector<uint16_t> out_fast = out_ref;
      for (int64_t t = 1; t <= 6; ++t) {
        auto g = test::random_vector(n, 90 + t, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i += 7) g[i] *= 1e-6f;
        for (size_t i = 0; i < n; i += 11) g[i] = 0.0f;
        for (size_t i = 0; i < n; ++i) g[i] = bf16_to_f32(f32_to_bf16(g[i]));
        reference_step(ref.view, segments, g, &out_ref, h, t, 0.7f);
        // bf16 gradients in the copy's buffer, where the segments name them.
        for (const AdamWSegment& seg : segments)
          for (size_t i = seg.offset; i < seg.offset + seg.count; ++i) out_fast[i] = f32_to_bf16(g[i]);
        lean_adamw_step(fast.view, segments, out_fast.data(), DType::BF16, out_fast.data(), h, t, 0.7f);
        ASSERT_EQ(fast.arrays, ref.arrays) << "step " << t;
        ASSERT_EQ(out_fast, out_ref) << "step " << t;
      }
    }
}

// The compensated master's carry (c rounded up to 128 units, so hi moves to the next bf16) where
// the next bf16 lies in the next binade, whose units are twice as large: masters at powers of two
// stepped down by just under half a bf16 ulp of the binade below (one AdamW step moves each by
// about lr), of both signs, so that most elements' rounding carries across the binade's edge.
TEST(LeanAdamW, KernelMatchesScalarReferenceAtBinadeCarries) {
  const size_t n = 64 * kStateBlock;
  AdamWHyper h;
  h.lr = std::ldexp(1.0, -9) + std::ldexp(1.0, -21);  // half an ulp of [0.5, 1) less 2^-21
  h.weight_decay = 0.0;
  std::vector<float> init(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    const bool negative = i % 2 == 1;
    init[i] = negative ? -1.0f : 1.0f;
    g[i] = negative ? -0.5f : 0.5f;
  }
  for (const int64_t mask : kernel_target_masks()) {
    const KernelTarget target(mask);
    SCOPED_TRACE(lean::block_kernel_target());
    LeanBuffers fast(OptimizerStateFormat::Bf16C8Q8, n, 17), ref(OptimizerStateFormat::Bf16C8Q8, n, 17);
    lean_write_masters(fast.view, init.data(), 0, n);
    lean_write_masters(ref.view, init.data(), 0, n);
    const AdamWSegment all{0, n, false};
    std::vector<uint16_t> out_ref(n), out_fast(n);
    reference_step(ref.view, {&all, 1}, g, &out_ref, h, 1, 1.0f);
    lean_adamw_step(fast.view, {&all, 1}, g.data(), DType::F32, out_fast.data(), h, 1, 1.0f);
    EXPECT_EQ(fast.arrays, ref.arrays);
    EXPECT_EQ(out_fast, out_ref);
    // Most elements carried: hi is 1.0 (or -1.0) again, with c = -64 units of the upper binade.
    size_t carried = 0;
    for (size_t i = 0; i < n; ++i)
      carried += (fast.view.master_bf16[i] & 0x7fffu) == 0x3f80u && fast.view.compensation[i] == -64;
    EXPECT_GT(carried, n / 2);
  }
}

// The step's size against fp64 AdamW's late in a run whose gradients fall (as a training run's do)
// and differ 50-fold within a block: v rounded to nearest kept its code and made the lean steps
// larger (the projection of steps 151-200 on AdamW's: 1.015; the loss of such runs fell faster
// than the exact run's); rounded stochastically it is 1.001. Masters start at 0 (fp32_q8, no
// decay), so that their rounding is far below the steps.
TEST(LeanAdamW, StepSizeDoesNotDriftFromAdamW) {
  const size_t n = 64 * kStateBlock;
  AdamWHyper h;
  h.lr = 1e-6;
  const auto log_scale = test::random_vector(n, 101, -2.0f, 2.0f);
  const std::vector<float> zeros(n, 0.0f);
  LeanBuffers s(OptimizerStateFormat::Fp32Q8, n, 3);
  lean_write_masters(s.view, zeros.data(), 0, n);
  RefAdamW ref(zeros);
  const AdamWSegment all{0, n, false};
  std::vector<float> before = s.masters();
  std::vector<double> ref_before = ref.p;
  double dot = 0.0, norm = 0.0;
  for (int64_t t = 1; t <= 200; ++t) {
    const auto noise = test::random_vector(n, 200 + t, -1.7f, 1.7f);
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i)
      g[i] = std::exp(log_scale[i]) * 3.0f / (1.0f + t / 30.0f) * (noise[i] + 0.3f);
    lean_adamw_step(s.view, {&all, 1}, g.data(), DType::F32, nullptr, h, t, 1.0f);
    ref.step(g, h, t);
    const std::vector<float> after = s.masters();
    if (t > 150) {
      for (size_t i = 0; i < n; ++i) {
        const double lean_step = static_cast<double>(after[i]) - before[i];
        const double exact_step = ref.p[i] - ref_before[i];
        dot += lean_step * exact_step;
        norm += exact_step * exact_step;
      }
    }
    before = after;
    ref_before = ref.p;
  }
  EXPECT_NEAR(dot / norm, 1.0, 0.0075);
}

TEST(LeanAdamW, ResultDoesNotDependOnThreads) {
  // Segments with and without decay and bf16 gradients, over 1 thread and over a pool of 4 that
  // takes the blocks in pieces of 1024 (several pieces, the last partial, a segment's end inside one).
  const size_t n = 5000 * kStateBlock + 17;
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  const auto init = test::random_vector(n, 41);
  ThreadPool one(1), four(4);
  for (auto format :
       {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8}) {
    SCOPED_TRACE(state_format_name(format));
    LeanBuffers a(format, n, 5), b(format, n, 5);
    lean_write_masters(a.view, init.data(), 0, n);
    lean_write_masters(b.view, init.data(), 0, n);
    const AdamWSegment split[2] = {{0, n / 3, true}, {n / 3, n - n / 3, false}};
    for (int64_t t = 1; t <= 3; ++t) {
      const auto g32 = test::random_vector(n, 50 + t);
      std::vector<uint16_t> g(n), out_a(n), out_b(n);
      for (size_t i = 0; i < n; ++i) g[i] = f32_to_bf16(g32[i]);
      lean_adamw_step(a.view, split, g.data(), DType::BF16, out_a.data(), h, t, 0.5f, one);
      lean_adamw_step(b.view, split, g.data(), DType::BF16, out_b.data(), h, t, 0.5f, four);
      EXPECT_EQ(out_a, out_b);
      // The upload copy is the new master in bf16.
      const auto masters = a.masters();
      for (size_t i = 0; i < n; i += 97) ASSERT_EQ(out_a[i], f32_to_bf16(masters[i])) << i;
    }
    EXPECT_EQ(a.arrays, b.arrays);
  }
}

TEST(LeanAdamW, RowsMatchTheWholeUnitPass) {
  const size_t row = kStateBlock, rows = 50, n = row * rows;
  AdamWHyper h;
  h.lr = 1e-2;
  const auto init = test::random_vector(n, 61);
  for (auto format :
       {OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8}) {
    SCOPED_TRACE(state_format_name(format));
    LeanBuffers whole(format, n, 8), by_rows(format, n, 8);
    lean_write_masters(whole.view, init.data(), 0, n);
    lean_write_masters(by_rows.view, init.data(), 0, n);
    const AdamWSegment all{0, n, false};
    for (int64_t t = 1; t <= 3; ++t) {
      const auto g = test::random_vector(n, 70 + t);
      std::vector<int32_t> touched, untouched;
      for (size_t r = 0; r < rows; ++r)
        ((r * 7 + t) % 3 ? touched : untouched).push_back(static_cast<int32_t>(r));
      std::vector<float> dense(n, 0.0f), gathered;
      for (int32_t r : touched)
        for (size_t j = 0; j < row; ++j) {
          dense[r * row + j] = g[r * row + j];
          gathered.push_back(g[r * row + j]);
        }
      lean_adamw_step(whole.view, {&all, 1}, dense.data(), DType::F32, nullptr, h, t, 1.0f);
      lean_adamw_rows(by_rows.view, row, untouched, false, nullptr, DType::F32, nullptr, h, t, 1.0f);
      lean_adamw_rows(by_rows.view, row, touched, false, gathered.data(), DType::F32, nullptr, h, t, 1.0f);
    }
    EXPECT_EQ(whole.arrays, by_rows.arrays);
  }
}

TEST(LeanAdamW, Fp32MasterCountsLostUpdates) {
  // lr 1e-9 on parameters near 1: each step moves ~1e-9, under half an fp32 ulp (6e-8): every
  // update is lost to nearest rounding, and counted.
  const size_t n = 256;
  AdamWHyper h;
  h.lr = 1e-9;
  const std::vector<float> init(n, 1.0f);
  const AdamWSegment all{0, n, false};
  LeanBuffers s(OptimizerStateFormat::Fp32Q8, n, 1);
  lean_write_masters(s.view, init.data(), 0, n);
  const auto g = test::random_vector(n, 3);
  LeanStepStats stats = lean_adamw_step(s.view, {&all, 1}, g.data(), DType::F32, nullptr, h, 1, 1.0f);
  EXPECT_EQ(stats.updated, n);
  EXPECT_EQ(stats.lost, n);
  h.lr = 1e-3;
  stats = lean_adamw_step(s.view, {&all, 1}, g.data(), DType::F32, nullptr, h, 2, 1.0f);
  EXPECT_EQ(stats.lost, 0u);
}

}  // namespace
}  // namespace ferry
