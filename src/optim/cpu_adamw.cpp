// The SIMD kernel of cpu_adamw.h, compiled once per Highway target (foreach_target re-includes this
// file with HWY_TARGET set to each), and the dispatching, thread-splitting entry point.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): Highway's Mul/Add on x86 are plain
// vector arithmetic to GCC, which would otherwise fuse e.g. (param * decay) + update into one FMA and
// round differently from the reference. The fused multiply-adds the reference has are explicit here.

#ifndef FERRY_OPTIM_CPU_ADAMW_ONCE
#define FERRY_OPTIM_CPU_ADAMW_ONCE

#include "optim/cpu_adamw.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "optim/adamw_scalars.h"

namespace ferry::cpu_adamw_detail {

// The step's scalars (adamw_scalars.h) and the factor the gradient is multiplied by first.
struct Scalars : AdamWScalars {
  float grad_scale;
};

struct Pointers {
  float* master;
  float* m;
  float* v;
  const void* grad;
  bool grad_bf16;
  uint16_t* bf16_out;  // may be null
};

}  // namespace ferry::cpu_adamw_detail

#endif  // FERRY_OPTIM_CPU_ADAMW_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/cpu_adamw.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace ferry {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using cpu_adamw_detail::Pointers;
using cpu_adamw_detail::Scalars;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// a*b + c with one rounding, as std::fma. Targets without FMA instructions get it lane by lane from
// std::fma (exact in software) rather than hn::MulAdd, which would round twice there.
HWY_INLINE V FusedMulAdd(V a, V b, V c) {
#if HWY_NATIVE_FMA
  return hn::MulAdd(a, b, c);
#else
  const D d;
  HWY_ALIGN float fa[kMaxLanes];
  HWY_ALIGN float fb[kMaxLanes];
  HWY_ALIGN float fc[kMaxLanes];
  hn::Store(a, d, fa);
  hn::Store(b, d, fb);
  hn::Store(c, d, fc);
  for (size_t i = 0; i < hn::Lanes(d); ++i) fa[i] = std::fma(fa[i], fb[i], fc[i]);
  return hn::Load(d, fa);
#endif
}

// f32_to_bf16 of core/dtype.h on every lane: round to nearest even; NaN stays NaN (quieted).
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> ToBf16(V x) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> d16;
  (void)d;
  const auto bits = hn::BitCast(du, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  // |x| as a signed integer fits in 31 bits, so the signed compare is the unsigned one.
  const auto is_nan =
      hn::Gt(hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7fffffffu))), hn::Set(di, 0x7f800000));
  const auto result = hn::IfThenElse(hn::RebindMask(du, is_nan), quiet_nan, rounded);
  // Every lane is <= 0xffff, so the saturating narrowing is exact.
  return hn::DemoteTo(d16, hn::BitCast(di, result));
}

// Streaming (non-temporal) stores of the bf16 copy: nothing reads it on the CPU afterwards (the next
// h2d does), so its lines need not be read for ownership first, saving 2 of 28 bytes per parameter.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kCanStream = true;
#else
constexpr bool kCanStream = false;
#endif

// One vector of elements at the given addresses: adamw.cpp's update_loop, operation for operation.
// kStream: `out` is aligned to a whole vector of bf16 and is written with a streaming store.
// `grad` and `out` may be the same address (cpu_adamw.h), so neither is restrict-qualified: the
// gradient is loaded first and `out` stored last.
template <bool kLerpSmall, bool kBf16Grad, bool kWriteBf16, bool kStream>
HWY_INLINE void UpdateVector(const Scalars& s, float decay_factor, float* HWY_RESTRICT master,
                             float* HWY_RESTRICT m, float* HWY_RESTRICT v, const void* grad, uint16_t* out) {
  const D d;
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  V g;
  if constexpr (kBf16Grad) {
    g = hn::BitCast(d,
                    hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, static_cast<const uint16_t*>(grad)))));
  } else {
    g = hn::LoadU(d, static_cast<const float*>(grad));
  }
  g = hn::Mul(g, hn::Set(d, s.grad_scale));
  V p = hn::Mul(hn::LoadU(d, master), hn::Set(d, decay_factor));
  const V mi = hn::LoadU(d, m);
  const float lerp_coef = kLerpSmall ? s.lerp_weight : s.lerp_weight - 1.0f;
  const V m_new = FusedMulAdd(hn::Set(d, lerp_coef), hn::Sub(g, mi), kLerpSmall ? mi : g);
  const V vi = FusedMulAdd(hn::Mul(hn::Set(d, s.one_minus_beta2), g), g,
                           hn::Mul(hn::LoadU(d, v), hn::Set(d, s.beta2)));
  const V denom = hn::Add(hn::Div(hn::Sqrt(vi), hn::Set(d, s.bc2_sqrt)), hn::Set(d, s.eps));
  p = hn::Add(p, hn::Div(hn::Mul(hn::Set(d, s.neg_step_size), m_new), denom));
  hn::StoreU(m_new, d, m);
  hn::StoreU(vi, d, v);
  hn::StoreU(p, d, master);
  if constexpr (kWriteBf16 && kStream)
    hn::Stream(ToBf16(p), d16, out);
  else if constexpr (kWriteBf16)
    hn::StoreU(ToBf16(p), d16, out);
}

// Fewer than one vector of elements [i, i + count): the same code on padded copies, so they round
// the same way.
template <bool kLerpSmall, bool kBf16Grad, bool kWriteBf16>
HWY_NOINLINE void UpdatePartial(const Pointers& ptr, const Scalars& s, float decay_factor, size_t i,
                                size_t count) {
  const size_t grad_size = kBf16Grad ? sizeof(uint16_t) : sizeof(float);
  HWY_ALIGN float master[kMaxLanes] = {};
  HWY_ALIGN float m[kMaxLanes] = {};
  HWY_ALIGN float v[kMaxLanes] = {};
  HWY_ALIGN float g[kMaxLanes] = {};  // as bytes: room for kMaxLanes fp32 or bf16 gradients
  HWY_ALIGN uint16_t out[kMaxLanes] = {};
  std::memcpy(master, ptr.master + i, count * sizeof(float));
  std::memcpy(m, ptr.m + i, count * sizeof(float));
  std::memcpy(v, ptr.v + i, count * sizeof(float));
  std::memcpy(g, static_cast<const char*>(ptr.grad) + i * grad_size, count * grad_size);
  UpdateVector<kLerpSmall, kBf16Grad, kWriteBf16, false>(s, decay_factor, master, m, v, g, out);
  std::memcpy(ptr.master + i, master, count * sizeof(float));
  std::memcpy(ptr.m + i, m, count * sizeof(float));
  std::memcpy(ptr.v + i, v, count * sizeof(float));
  if (kWriteBf16) std::memcpy(ptr.bf16_out + i, out, count * sizeof(uint16_t));
}

template <bool kLerpSmall, bool kBf16Grad, bool kWriteBf16>
HWY_NOINLINE void UpdateRangeT(const Pointers& ptr, const Scalars& s, float decay_factor, size_t begin,
                               size_t end) {
  const D d;
  const size_t n = hn::Lanes(d);
  const size_t grad_size = kBf16Grad ? sizeof(uint16_t) : sizeof(float);
  const char* grad = static_cast<const char*>(ptr.grad);
  size_t i = begin;
  constexpr bool kStream = kWriteBf16 && kCanStream;
  if constexpr (kStream) {
    // Peel elements until the bf16 destination is aligned to a whole vector for streaming stores.
    const size_t vector_bytes = n * sizeof(uint16_t);
    const size_t misaligned = reinterpret_cast<uintptr_t>(ptr.bf16_out + i) % vector_bytes;
    const size_t head =
        std::min(end - i, misaligned == 0 ? 0 : (vector_bytes - misaligned) / sizeof(uint16_t));
    if (head > 0) UpdatePartial<kLerpSmall, kBf16Grad, kWriteBf16>(ptr, s, decay_factor, i, head);
    i += head;
  }
  for (; i + n <= end; i += n) {
    UpdateVector<kLerpSmall, kBf16Grad, kWriteBf16, kStream>(s, decay_factor, ptr.master + i, ptr.m + i,
                                                             ptr.v + i, grad + i * grad_size,
                                                             kWriteBf16 ? ptr.bf16_out + i : nullptr);
  }
  if (i < end) UpdatePartial<kLerpSmall, kBf16Grad, kWriteBf16>(ptr, s, decay_factor, i, end - i);
  // Streaming stores are weakly ordered: fence them before the pool reports this slice done.
  if constexpr (kStream) hwy::FlushStream();
}

template <bool kLerpSmall, bool kBf16Grad>
void UpdateRangeOut(const Pointers& ptr, const Scalars& s, float decay_factor, size_t begin, size_t end) {
  if (ptr.bf16_out != nullptr)
    UpdateRangeT<kLerpSmall, kBf16Grad, true>(ptr, s, decay_factor, begin, end);
  else
    UpdateRangeT<kLerpSmall, kBf16Grad, false>(ptr, s, decay_factor, begin, end);
}

template <bool kLerpSmall>
void UpdateRangeGrad(const Pointers& ptr, const Scalars& s, float decay_factor, size_t begin, size_t end) {
  if (ptr.grad_bf16)
    UpdateRangeOut<kLerpSmall, true>(ptr, s, decay_factor, begin, end);
  else
    UpdateRangeOut<kLerpSmall, false>(ptr, s, decay_factor, begin, end);
}

}  // namespace

// Elements [begin, end) of the unit, one weight-decay factor.
void UpdateRange(const Pointers& ptr, const Scalars& s, float decay_factor, size_t begin, size_t end) {
  // torch's lerp: weight < 0.5 -> self + weight*(end - self); else end - (end - self)*(1 - weight).
  if (s.lerp_weight < 0.5f)
    UpdateRangeGrad<true>(ptr, s, decay_factor, begin, end);
  else
    UpdateRangeGrad<false>(ptr, s, decay_factor, begin, end);
}

const char* TargetName() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace ferry
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ferry {

HWY_EXPORT(UpdateRange);
HWY_EXPORT(TargetName);

namespace {

using cpu_adamw_detail::Pointers;
using cpu_adamw_detail::Scalars;

// Below this many elements the calling thread does the whole unit: waking the pool costs more.
constexpr size_t kGrain = size_t{1} << 15;
// The pool's threads take blocks of this many elements (about 5 MB of state and gradient each);
// a multiple of 64, so a block covers whole cache lines of every buffer (64 bf16 = 128 bytes) when
// the range starts on one, and no two threads write one line.
constexpr size_t kBlock = size_t{1} << 18;

}  // namespace

size_t check_adamw_unit(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments, int64_t step) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  FERRY_ASSERT(unit.grad_dtype == DType::F32 || unit.grad_dtype == DType::BF16, "gradients are F32 or BF16");
  size_t total = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    FERRY_ASSERT(k == 0 || segments[k].offset >= segments[k - 1].offset + segments[k - 1].count,
                 "AdamW segments must be sorted and disjoint");
    total += segments[k].count;
  }
  if (total == 0) return 0;
  FERRY_ASSERT(unit.master && unit.m && unit.v && unit.grad);
  FERRY_ASSERT(unit.grad != static_cast<const void*>(unit.bf16_out) || unit.grad_dtype == DType::BF16,
               "only bf16 gradients may share the buffer of the bf16 copy");
  return total;
}

void cpu_adamw_step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments,
                    const AdamWHyper& hyper, int64_t step, float grad_scale, ThreadPool& pool) {
  const size_t total = check_adamw_unit(unit, segments, step);
  if (total == 0) return;

  const Scalars s{adamw_scalars(hyper, step), grad_scale};
  const Pointers ptr{unit.master, unit.m, unit.v, unit.grad, unit.grad_dtype == DType::BF16, unit.bf16_out};
  const auto update = HWY_DYNAMIC_DISPATCH(UpdateRange);

  // Updates the parts of every segment inside [lo, hi).
  const auto run = [&](size_t lo, size_t hi) {
    for (const AdamWSegment& seg : segments) {
      const size_t a = std::max(lo, seg.offset);
      const size_t b = std::min(hi, seg.offset + seg.count);
      if (a < b) update(ptr, s, seg.decay ? s.decay_factor : 1.0f, a, b);
    }
  };
  const size_t begin = segments.front().offset;
  const size_t end = segments.back().offset + segments.back().count;
  if (total < kGrain || pool.size() == 1) {
    run(begin, end);
    return;
  }
  // Threads take blocks of kBlock elements from a shared counter until none is left. A static
  // slice per thread would make the pass as slow as its slowest thread, and in a training step
  // some core is always busy with something else (the engine's host thread issuing kernels, the
  // CUDA driver): measured, the static partition ran at 4.0 G params/s inside an 8B step against
  // 6.2 alone. Each element's update is independent, so who updates it changes no bit.
  // Blocks are cut at multiples of kBlock, so every cut falls on a cache line of every buffer.
  const size_t first = begin / kBlock * kBlock;
  pool.for_each_piece((end - first + kBlock - 1) / kBlock, [&](size_t k) {
    const size_t lo = first + k * kBlock;
    run(std::max(begin, lo), std::min(end, lo + kBlock));
  });
}

void cpu_adamw_rows(const AdamWUnitBuffers& unit, size_t row_len, std::span<const int32_t> rows, bool decay,
                    const AdamWHyper& hyper, int64_t step, float grad_scale, ThreadPool& pool) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  FERRY_ASSERT(unit.grad_dtype == DType::F32 || unit.grad_dtype == DType::BF16, "gradients are F32 or BF16");
  if (rows.empty() || row_len == 0) return;
  FERRY_ASSERT(unit.master && unit.m && unit.v);
  FERRY_ASSERT(unit.grad == nullptr || unit.grad != static_cast<const void*>(unit.bf16_out),
               "gathered row gradients must not share the buffer of the bf16 copy");
  const Scalars s{adamw_scalars(hyper, step), grad_scale};
  const float decay_factor = decay ? s.decay_factor : 1.0f;
  const size_t grad_size = dtype_size(unit.grad_dtype);
  // A zero gradient is one row of zero bytes every row reads (fp32 zeros are bf16 zeros twice).
  const std::vector<float> zeros(unit.grad == nullptr ? row_len : 0, 0.0f);
  const char* const grad = unit.grad != nullptr ? static_cast<const char*>(unit.grad)
                                                : reinterpret_cast<const char*>(zeros.data());
  const size_t grad_stride = unit.grad != nullptr ? row_len * grad_size : 0;
  const bool grad_bf16 = unit.grad_dtype == DType::BF16;
  const auto update = HWY_DYNAMIC_DISPATCH(UpdateRange);
  const auto run = [&](size_t lo, size_t hi) {
    for (size_t k = lo; k < hi; ++k) {
      const size_t o = static_cast<size_t>(rows[k]) * row_len;
      const Pointers ptr{unit.master + o, unit.m + o,
                         unit.v + o,      grad + k * grad_stride,
                         grad_bf16,       unit.bf16_out != nullptr ? unit.bf16_out + o : nullptr};
      update(ptr, s, decay_factor, 0, row_len);
    }
  };
  if (rows.size() * row_len < kGrain || pool.size() == 1) {
    run(0, rows.size());
    return;
  }
  // Blocks of whole rows, about kBlock elements each.
  const size_t block_rows = std::max<size_t>(1, kBlock / row_len);
  pool.for_each_piece((rows.size() + block_rows - 1) / block_rows,
                      [&](size_t k) { run(k * block_rows, std::min(rows.size(), (k + 1) * block_rows)); });
}

const char* cpu_adamw_target() {
  return HWY_DYNAMIC_DISPATCH(TargetName)();
}

}  // namespace ferry
#endif  // HWY_ONCE
