// The SIMD CPU AdamW against the scalar reference adamw_step: bit for bit, on every Highway target
// this CPU runs, at awkward sizes, with fp32 and bf16 gradients, both lerp branches, decay and no
// decay per segment, clipping scales, and the bf16 copy of the new weights.
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "test_util.h"

namespace ferry {
namespace {

// Segments of a unit of n elements: a decayed block, a short undecayed one (a norm), a gap of 3
// elements nobody updates, and a decayed rest.
std::vector<AdamWSegment> segments_for(size_t n) {
  if (n < 16) return {AdamWSegment{0, n, true}};
  const size_t a = n / 3;
  return {AdamWSegment{0, a, true}, AdamWSegment{a, 7, false}, AdamWSegment{a + 10, n - a - 10, true}};
}

struct UnitState {
  std::vector<float> master, m, v;
  std::vector<uint16_t> out;
};

UnitState initial_state(size_t n, uint64_t seed) {
  UnitState s;
  s.master = test::random_vector(n, seed);
  s.m = test::random_vector(n, seed + 1, -0.05f, 0.05f);
  s.v = test::random_vector(n, seed + 2, 0.0f, 0.01f);
  s.out.assign(n, 0xBEEF);  // sentinel: must survive outside the segments
  return s;
}

std::vector<uint16_t> bf16_grads(size_t n, uint64_t seed, float scale) {
  const auto g = test::random_vector(n, seed, -scale, scale);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(g[i]);
  return out;
}

::testing::AssertionResult bits_equal(const std::vector<float>& actual, const std::vector<float>& expected,
                                      const char* what) {
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], 4) != 0) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << actual[i] << " but the reference has " << expected[i] << " (of "
             << actual.size() << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  size_t n;
  bool bf16_grad;
  AdamWHyper hyper;
  float grad_scale;
};

// Three steps of both implementations from the same state; every buffer compared bit for bit.
void check_case(const Case& c, ThreadPool& pool) {
  SCOPED_TRACE(::testing::Message() << "n=" << c.n << " bf16_grad=" << c.bf16_grad
                                    << " beta1=" << c.hyper.beta1 << " wd=" << c.hyper.weight_decay
                                    << " scale=" << c.grad_scale << " threads=" << pool.size()
                                    << " target=" << cpu_adamw_target());
  const auto segments = segments_for(c.n);
  UnitState ours = initial_state(c.n, 11 + c.n);
  UnitState ref = ours;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grad_f32;
    std::vector<uint16_t> grad_bf16;
    if (c.bf16_grad) {
      grad_bf16 = bf16_grads(c.n, 100 * step + c.n, 0.3f * step);
      grad_f32.resize(c.n);
      for (size_t i = 0; i < c.n; ++i) grad_f32[i] = bf16_to_f32(grad_bf16[i]);
    } else {
      grad_f32 = test::random_vector(c.n, 100 * step + c.n, -0.3f * step, 0.3f * step);
    }
    AdamWUnitBuffers unit;
    unit.master = ours.master.data();
    unit.m = ours.m.data();
    unit.v = ours.v.data();
    unit.grad = c.bf16_grad ? static_cast<const void*>(grad_bf16.data()) : grad_f32.data();
    unit.grad_dtype = c.bf16_grad ? DType::BF16 : DType::F32;
    unit.bf16_out = ours.out.data();
    cpu_adamw_step(unit, segments, c.hyper, step, c.grad_scale, pool);
    for (const AdamWSegment& seg : segments) {
      adamw_step(ref.master.data() + seg.offset, ref.m.data() + seg.offset, ref.v.data() + seg.offset,
                 grad_f32.data() + seg.offset, seg.count, c.hyper, step, seg.decay, c.grad_scale);
    }
    ASSERT_TRUE(bits_equal(ours.master, ref.master, "master")) << "step " << step;
    ASSERT_TRUE(bits_equal(ours.m, ref.m, "m")) << "step " << step;
    ASSERT_TRUE(bits_equal(ours.v, ref.v, "v")) << "step " << step;
  }
  // The bf16 copy is the last step's masters, rounded; untouched where no segment reaches.
  std::vector<bool> covered(c.n, false);
  for (const AdamWSegment& seg : segments)
    for (size_t i = seg.offset; i < seg.offset + seg.count; ++i) covered[i] = true;
  for (size_t i = 0; i < c.n; ++i) {
    const uint16_t expected = covered[i] ? f32_to_bf16(ref.master[i]) : uint16_t{0xBEEF};
    ASSERT_EQ(ours.out[i], expected) << "bf16 copy at " << i;
  }
}

std::vector<Case> all_cases(const std::vector<size_t>& sizes) {
  AdamWHyper plain;
  plain.lr = 1e-3;
  AdamWHyper decayed = plain;
  decayed.weight_decay = 0.1;
  decayed.lr = 3e-2;
  AdamWHyper low_beta1 = decayed;  // 1 - beta1 >= 0.5: torch's other lerp branch
  low_beta1.beta1 = 0.3;
  low_beta1.beta2 = 0.95;
  low_beta1.eps = 1e-6;
  std::vector<Case> cases;
  for (size_t n : sizes) {
    for (bool bf16 : {false, true}) {
      cases.push_back({n, bf16, plain, 1.0f});
      cases.push_back({n, bf16, decayed, 0.37f});
      cases.push_back({n, bf16, low_beta1, 0.8f});
    }
  }
  return cases;
}

// Runs `body` once per SIMD target compiled in and supported here, dispatching to that target.
template <typename Body>
void for_each_target(Body body) {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(cpu_adamw_target(), hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Runs `body` with a pool of one and of four threads on every SIMD target.
template <typename Body>
void for_each_target_and_pool(Body body) {
  for_each_target([&] {
    for (size_t threads : {1, 4}) {
      ThreadPool pool(threads);
      body(pool);
    }
  });
}

AdamWHyper decayed_hyper() {
  AdamWHyper h;
  h.lr = 3e-2;
  h.weight_decay = 0.1;
  return h;
}

TEST(CpuAdamW, ListsItsTargets) {
  std::string names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) names += std::string(hwy::TargetName(t)) + " ";
  std::printf("Highway targets compiled in and supported here: %s; dispatch picks %s\n", names.c_str(),
              cpu_adamw_target());
  // The x86 build carries SSSE3, SSE4, AVX2 and AVX-512 kernels; at least the baseline runs anywhere.
  EXPECT_GE(hwy::SupportedAndGeneratedTargets().size(), 2u);
}

TEST(CpuAdamW, BitIdenticalToReferenceOnEveryTargetAtAwkwardSizes) {
  ThreadPool one(1);
  for_each_target([&] {
    for (const Case& c : all_cases({0, 1, 31, 33, 1000})) check_case(c, one);
  });
}

TEST(CpuAdamW, BitIdenticalToReferenceOnAMillionElementsOverThreads) {
  ThreadPool four(4);
  const auto cases = all_cases({1000003});
  // Every case on the target dispatch picks; two (one per gradient dtype and lerp branch) on the
  // others, whose scalar-fma fallbacks are slow.
  for (const Case& c : cases) check_case(c, four);
  for_each_target([&] {
    check_case(cases[1], four);
    check_case(cases[5], four);
  });
}

TEST(CpuAdamW, BitIdenticalWithTheGlobalPool) {
  for (const Case& c : all_cases({200003})) check_case(c, ThreadPool::global());
}

// With lr = 0 the masters pass through unchanged, so the bf16 copy can be checked on chosen bit
// patterns: rounding ties, values that round up to infinity, NaNs with payloads, subnormals, zeros.
TEST(CpuAdamW, Bf16CopyRoundsAsF32ToBf16) {
  std::vector<uint32_t> patterns = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu,
                                    0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
                                    0xffbfffffu, 0x00000001u, 0x00008000u, 0x80018000u, 0x00000000u,
                                    0x80000000u, 0x7f7f8000u, 0x3f7fffffu};
  std::mt19937 rng(5);
  while (patterns.size() < 4099) patterns.push_back(static_cast<uint32_t>(rng()));
  const size_t n = patterns.size();
  AdamWHyper hyper;  // lr = 0
  for_each_target([&] {
    std::vector<float> master(n), m(n, 0.01f), v(n, 0.02f), grad = test::random_vector(n, 9);
    std::memcpy(master.data(), patterns.data(), n * 4);
    std::vector<uint16_t> out(n);
    const AdamWSegment all{0, n, true};
    AdamWUnitBuffers unit{master.data(), m.data(), v.data(), grad.data(), DType::F32, out.data()};
    ThreadPool one(1);
    cpu_adamw_step(unit, std::span<const AdamWSegment>(&all, 1), hyper, 1, 1.0f, one);
    for (size_t i = 0; i < n; ++i) {
      uint32_t after;
      std::memcpy(&after, &master[i], 4);
      // x + (-0 * m) / denom: unchanged, except that -0 may become +0.
      if ((patterns[i] & 0x7fffffffu) != 0) {
        const bool nan = (patterns[i] & 0x7fffffffu) > 0x7f800000u;
        ASSERT_EQ(after, nan ? (patterns[i] | 0x00400000u) : patterns[i]) << std::hex << patterns[i];
      }
      ASSERT_EQ(out[i], f32_to_bf16(master[i])) << std::hex << patterns[i];
    }
  });
}

// The sliding engine's layout: the bf16 gradient sits in the buffer that receives the bf16 copy.
// Every element must see its own gradient, on every target, at offsets that make the streaming
// stores peel, over one and several threads.
TEST(CpuAdamW, GradientInTheBf16CopyBufferIsReadBeforeItIsOverwritten) {
  const AdamWHyper hyper = decayed_hyper();
  for_each_target_and_pool([&](ThreadPool& pool) {
    const size_t threads = pool.size();
    for (size_t n : {1, 31, 33, 1000, 200003}) {
      for (size_t shift : {0, 1, 5}) {  // the buffer's start, in elements past an aligned address
        SCOPED_TRACE(::testing::Message() << "n=" << n << " shift=" << shift << " threads=" << threads);
        const auto segments = segments_for(n);
        UnitState ours = initial_state(n, 7 + n), ref = ours;
        const std::vector<uint16_t> grad = bf16_grads(n, 3 + n, 0.4f);
        std::vector<uint16_t> shared(n + shift);
        std::memcpy(shared.data() + shift, grad.data(), n * 2);
        std::vector<float> grad_f32(n);
        for (size_t i = 0; i < n; ++i) grad_f32[i] = bf16_to_f32(grad[i]);
        AdamWUnitBuffers unit{ours.master.data(),    ours.m.data(), ours.v.data(),
                              shared.data() + shift, DType::BF16,   shared.data() + shift};
        cpu_adamw_step(unit, segments, hyper, 2, 0.6f, pool);
        std::vector<bool> covered(n, false);
        for (const AdamWSegment& seg : segments) {
          adamw_step(ref.master.data() + seg.offset, ref.m.data() + seg.offset, ref.v.data() + seg.offset,
                     grad_f32.data() + seg.offset, seg.count, hyper, 2, seg.decay, 0.6f);
          for (size_t i = seg.offset; i < seg.offset + seg.count; ++i) covered[i] = true;
        }
        ASSERT_TRUE(bits_equal(ours.master, ref.master, "master"));
        ASSERT_TRUE(bits_equal(ours.m, ref.m, "m"));
        ASSERT_TRUE(bits_equal(ours.v, ref.v, "v"));
        for (size_t i = 0; i < n; ++i)  // outside every segment the gradient stays
          ASSERT_EQ(shared[shift + i], covered[i] ? f32_to_bf16(ref.master[i]) : grad[i]) << "element " << i;
      }
    }
  });
}

// An embedding updated in two passes -- first the rows without a gradient (zero), then the rows
// with one, from their gradients gathered in row order -- holds the bits of one pass over the
// whole table whose gradient is zero outside those rows, on every target, over one and several
// threads, with and without decay and clipping. Rows neither pass names stay untouched.
TEST(CpuAdamW, RowPassesGiveTheBitsOfTheWholeTablePass) {
  const AdamWHyper hyper = decayed_hyper();
  for_each_target_and_pool([&](ThreadPool& pool) {
    const size_t threads = pool.size();
    for (size_t row_len : {1, 33, 4096}) {
      for (bool decay : {true, false}) {
        const size_t rows = row_len == 4096 ? 70 : 500, n = rows * row_len;
        SCOPED_TRACE(::testing::Message()
                     << "row_len=" << row_len << " threads=" << threads << " decay=" << decay);
        std::mt19937 rng(static_cast<unsigned>(row_len + rows));
        std::vector<int32_t> with_grad, without_grad;
        for (size_t r = 0; r < rows; ++r) {
          const unsigned pick = rng() % 3;  // 0: a gradient, 1: none (zero), 2: in no pass
          if (pick == 0) with_grad.push_back(static_cast<int32_t>(r));
          if (pick == 1) without_grad.push_back(static_cast<int32_t>(r));
        }
        UnitState ours = initial_state(n, 5 + n), ref = ours;
        const std::vector<uint16_t> table_grad = bf16_grads(n, 9 + n, 0.4f);
        std::vector<uint16_t> gathered;
        std::vector<float> ref_grad(n, 0.0f);
        for (int32_t r : with_grad) {
          const size_t o = static_cast<size_t>(r) * row_len;
          gathered.insert(gathered.end(), table_grad.begin() + static_cast<ptrdiff_t>(o),
                          table_grad.begin() + static_cast<ptrdiff_t>(o + row_len));
          for (size_t i = o; i < o + row_len; ++i) ref_grad[i] = bf16_to_f32(table_grad[i]);
        }
        AdamWUnitBuffers unit{ours.master.data(), ours.m.data(),  ours.v.data(), nullptr,
                              DType::BF16,        ours.out.data()};
        cpu_adamw_rows(unit, row_len, without_grad, decay, hyper, 3, 0.6f, pool);
        unit.grad = gathered.data();
        cpu_adamw_rows(unit, row_len, with_grad, decay, hyper, 3, 0.6f, pool);
        std::vector<bool> covered(rows, false);
        for (const auto* list : {&with_grad, &without_grad}) {
          for (int32_t r : *list) {
            const size_t o = static_cast<size_t>(r) * row_len;
            adamw_step(ref.master.data() + o, ref.m.data() + o, ref.v.data() + o, ref_grad.data() + o,
                       row_len, hyper, 3, decay, 0.6f);
            covered[static_cast<size_t>(r)] = true;
          }
        }
        ASSERT_TRUE(bits_equal(ours.master, ref.master, "master"));
        ASSERT_TRUE(bits_equal(ours.m, ref.m, "m"));
        ASSERT_TRUE(bits_equal(ours.v, ref.v, "v"));
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(ours.out[i], covered[i / row_len] ? f32_to_bf16(ref.master[i]) : uint16_t{0xBEEF}) << i;
      }
    }
  });
}

TEST(CpuAdamW, EmptyUnitsAndSegmentsAreNoOps) {
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  float x = 1.0f, m = 0.0f, v = 0.0f, g = 1.0f;
  AdamWUnitBuffers unit{&x, &m, &v, &g, DType::F32, nullptr};
  cpu_adamw_step(unit, {}, hyper, 1, 1.0f);
  const AdamWSegment empty{0, 0, true};
  cpu_adamw_step(unit, std::span<const AdamWSegment>(&empty, 1), hyper, 1, 1.0f);
  EXPECT_EQ(x, 1.0f);
  // Without a bf16 destination only the fp32 state is written.
  const AdamWSegment one{0, 1, true};
  cpu_adamw_step(unit, std::span<const AdamWSegment>(&one, 1), hyper, 1, 1.0f);
  EXPECT_NE(x, 1.0f);
}

}  // namespace
}  // namespace ferry
