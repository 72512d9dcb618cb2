// Compiled without FMA contraction (CMakeLists.txt), as adamw.cpp: the per-element arithmetic is the
// reference's, with its two fused multiply-adds explicit; with -fno-math-errno, so that std::sqrt
// is the vector instruction alone (the results are the same IEEE square roots; only errno, which
// nothing reads, is left unset for negative inputs); and with -fno-trapping-math, so that GCC may
// compute a float operation on every lane where the code selects its result for some (AVX2 has no
// masked conversions; without it the compensated master's encoding stays scalar there).
//
// Every loop below runs over all kStateBlock lanes with no branch: choices are integer masks on
// the floats' bits (a float ?: lets GCC branch around arithmetic that may trap and keeps it from
// vectorizing, ops/cpu/vec_math.h), and float-to-int conversions are clamped to a range that holds
// every value the chosen lanes can take, so the unchosen lanes' garbage stays defined.

#include "optim/lean_kernel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "optim/lean_random.h"

namespace ferry::lean {

namespace {

constexpr size_t K = kStateBlock;
// The purposes of lean_random.h's numbers: the masters' rounding, v's.
constexpr uint32_t kRandomMaster = 0;
constexpr uint32_t kRandomV = 1;

[[gnu::always_inline]] inline uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}
[[gnu::always_inline]] inline float float_of(uint32_t b) {
  return std::bit_cast<float>(b);
}
// All ones where `condition`, else 0.
[[gnu::always_inline]] inline uint32_t mask_if(bool condition) {
  return 0u - static_cast<uint32_t>(condition);
}
[[gnu::always_inline]] inline uint32_t select(uint32_t mask, uint32_t yes, uint32_t no) {
  return (mask & yes) | (~mask & no);
}

// core/dtype.h's f32_to_bf16 without branches.
[[gnu::always_inline]] inline uint32_t bf16_nearest(uint32_t bits) {
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return select(mask_if((bits & 0x7fffffffu) > 0x7f800000u), (bits >> 16) | 0x40u, rounded);
}

// lean_adamw.cpp's pow2(k) for -149 <= k, as bits: 2^k for a normal power, the subnormal one below
// -126; above 127 the same wrapped bits the scalar shift gives (only zeros use them, times 0).
[[gnu::always_inline]] inline uint32_t pow2_bits(int32_t k) {
  const uint32_t sub = mask_if(k < -126);
  const uint32_t shift = static_cast<uint32_t>(std::max(k + 149, 0)) & sub;
  return select(sub, 1u << shift, static_cast<uint32_t>(k + 127) << 23);
}

// The exponent of a bf16 magnitude's ulp (lean_adamw.cpp's bf16_ulp_exponent).
[[gnu::always_inline]] inline int32_t ulp_exponent(uint32_t h) {
  return std::max(static_cast<int32_t>((h >> 7) & 0xffu), 1) - 127 - 7;
}

// An 8-bit float code (exponent field << mant | mantissa; 0 is zero) to its value in [0, 1].
template <int kMant>
[[gnu::always_inline]] inline float decode_f8(uint32_t code) {
  const uint32_t bits = ((code >> kMant) + 112u) << 23 | (code & ((1u << kMant) - 1)) << (23 - kMant);
  return float_of(select(mask_if(code != 0), bits, 0u));
}

// lean_adamw.cpp's encode_f8: x (at most 1 + ulp, or NaN; never negative) rounded up from `u` in [0, 1)
// (0.5: nearest); below the smallest code to it or to zero, with probability x / smallest.
template <int kMant>
[[gnu::always_inline]] inline uint32_t encode_f8(float x, float u) {
  constexpr int kDropped = 23 - kMant;
  constexpr float kSmallest = (1.0f + 1.0f / (1 << kMant)) * 0x1p-15f;
  const uint32_t xb = bits_of(x);
  const uint32_t positive = mask_if(xb != 0 && xb <= 0x7f800000u);
  const uint32_t small = mask_if(xb < bits_of(kSmallest));
  const uint32_t small_code = static_cast<uint32_t>(bits_of(u * kSmallest) < xb);
  const uint32_t offset =
      static_cast<uint32_t>(static_cast<int32_t>(u * static_cast<float>(1u << kDropped))) &
      ((1u << kDropped) - 1);
  const uint32_t b = xb + offset;
  const int32_t e = std::max(static_cast<int32_t>(b >> 23) - 127 + 15, 0);
  const uint32_t code = select(mask_if(e > 15), 15u << kMant | ((1u << kMant) - 1),
                               static_cast<uint32_t>(e) << kMant | ((b >> kDropped) & ((1u << kMant) - 1)));
  return positive & select(small, small_code, code);
}

// The largest of K non-negative floats by their bits, NaN and -0 counted as 0 (std::max over the
// values skips NaN as these do); exact, so any lane order gives it.
[[gnu::always_inline]] inline float block_max(const float* x) {
  uint32_t best = 0;
  for (size_t j = 0; j < K; ++j) {
    const uint32_t b = bits_of(x[j]);
    const uint32_t key = b & mask_if(b <= 0x7f800000u);
    best = best > key ? best : key;
  }
  return float_of(best);
}

[[gnu::always_inline]] inline bool usable_scale(float scale) {
  const uint32_t b = bits_of(scale);
  return b != 0 && b < 0x7f800000u;
}

// x with its magnitude at most 256 (NaN: 256), on the bits: a float comparison would branch.
[[gnu::always_inline]] inline float clamp256(float x) {
  const uint32_t b = bits_of(x);
  const uint32_t magnitude = b & 0x7fffffffu;
  return float_of(select(mask_if(magnitude > bits_of(256.0f)), bits_of(256.0f), magnitude) |
                  (b & 0x80000000u));
}

// lean_adamw.cpp's decode_compensated on bits (hi: bf16 with sign; c: the int8 compensation).
[[gnu::always_inline]] inline float decode_c8(uint32_t hi, int32_t c) {
  const uint32_t h = hi & 0x7fffu;
  const float magnitude =
      float_of(h << 16) + static_cast<float>(c) * float_of(pow2_bits(ulp_exponent(h) - 8));
  return float_of(bits_of(magnitude) ^ ((hi & 0x8000u) << 16));
}

// lean_adamw.cpp's encode_compensated: hi | c << 16.
[[gnu::always_inline]] inline uint32_t encode_c8(float x, float u) {
  const uint32_t xb = bits_of(x);
  const uint32_t finite = mask_if((xb & 0x7f800000u) != 0x7f800000u);
  const float a = float_of(xb & 0x7fffffffu);
  const uint32_t h = bf16_nearest(bits_of(a));
  const int32_t e = ulp_exponent(h);
  // |k| <= 128 wherever x is finite; the clamp only tames the other lanes.
  const float y = clamp256((a - float_of(h << 16)) * float_of(pow2_bits(8 - e)) + u);
  // floor(y) from the truncation (std::floor keeps this loop from vectorizing).
  const int32_t truncated = static_cast<int32_t>(y);
  const int32_t units = truncated - static_cast<int32_t>(static_cast<float>(truncated) > y);
  // units == 128: hi + ulp / 2 is the next bf16 less 128 units (or 64 of the next binade's).
  const float target = float_of(h << 16) + 128.0f * float_of(pow2_bits(e - 8));
  const uint32_t h_up = h + 1;
  const float up = (target - float_of(h_up << 16)) * float_of(pow2_bits(8 - ulp_exponent(h_up)));
  const int32_t units_up = static_cast<int32_t>(clamp256(up));
  const uint32_t carry = mask_if(units == 128);
  const uint32_t hi = select(carry, h_up, h) | (xb >> 16 & 0x8000u);
  const uint32_t c =
      static_cast<uint32_t>(select(carry, static_cast<uint32_t>(units_up), static_cast<uint32_t>(units))) &
      0xffu;
  return select(finite, hi | c << 16, bf16_nearest(xb));
}

// memcpy of `count` elements, of a constant size for a whole block (inlined: the variable one is a
// call per array per block).
template <typename T>
[[gnu::always_inline]] inline void copy_lanes(T* dst, const T* src, size_t count) {
  if (count == K)
    std::memcpy(dst, src, K * sizeof(T));
  else
    std::memcpy(dst, src, count * sizeof(T));
}

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FERRY_NO_CLONES)
[[gnu::flatten, gnu::target_clones("arch=x86-64-v4", "arch=haswell", "default")]]
#endif
void update_block(const LeanUnitState& s, size_t b, size_t count, const BlockInput& in, const StepConstants& c,
                  uint16_t* bf16_out, LeanStepStats& stats) {
  const size_t block = b / K;
  const AdamWScalars& sc = c.sc;
  const OptimizerStateFormat format = s.format;
  alignas(64) int8_t mq[K] = {};
  alignas(64) uint8_t vq[K] = {};
  alignas(64) uint16_t hi[K] = {};
  alignas(64) int8_t comp[K] = {};
  alignas(64) uint16_t out[K] = {};
  alignas(64) float before[K] = {}, p[K], m[K], v[K], root[K];
  alignas(64) uint32_t master_bits[K];
  copy_lanes(mq, s.m_q + b, count);
  copy_lanes(vq, s.v_q + b, count);
  if (format == OptimizerStateFormat::Fp32Q8) {
    copy_lanes(before, s.master + b, count);
  } else {
    copy_lanes(hi, s.master_bf16 + b, count);
    if (format == OptimizerStateFormat::Bf16C8Q8) {
      copy_lanes(comp, s.compensation + b, count);
      for (size_t j = 0; j < K; ++j) before[j] = decode_c8(hi[j], comp[j]);
    } else {
      for (size_t j = 0; j < K; ++j) before[j] = float_of(static_cast<uint32_t>(hi[j]) << 16);
    }
  }
  if (bf16_out != nullptr) copy_lanes(out, bf16_out + b, count);

  // The random numbers of the bf16 masters' stochastic rounding.
  if (format != OptimizerStateFormat::Fp32Q8)
    for (size_t j = 0; j < K; ++j) master_bits[j] = random_bits(c.key, b + j, kRandomMaster);

  const float m_scale = s.m_scale[block], v_scale = s.v_scale[block];
  const bool small_lerp = sc.lerp_weight < 0.5f;
  const float lerp_coef = small_lerp ? sc.lerp_weight : sc.lerp_weight - 1.0f;
  const uint32_t small_lerp_mask = mask_if(small_lerp);
  // Only the fp32 master loses updates to rounding; the others round stochastically.
  const uint32_t fp32_master = format == OptimizerStateFormat::Fp32Q8 ? 1u : 0u;
  size_t lost = 0, updated = 0;
  for (size_t j = 0; j < K; ++j) {
    // Decode (lean_adamw.cpp's dequantize_m, dequantize_v).
    const uint32_t qm = static_cast<uint32_t>(mq[j] < 0 ? -mq[j] : mq[j]);
    const float mi = float_of(bits_of(decode_f8<3>(qm) * m_scale) ^ (mq[j] < 0 ? 0x80000000u : 0u));
    const float ri = decode_f8<4>(vq[j]) * v_scale;
    const float vi = ri * ri;
    // adamw.cpp's update_loop, operation for operation.
    const float g = in.grad[j] * c.grad_scale;
    const float decayed = before[j] * float_of(select(in.decay[j], bits_of(sc.decay_factor), bits_of(1.0f)));
    const float m_new =
        std::fma(lerp_coef, g - mi, float_of(select(small_lerp_mask, bits_of(mi), bits_of(g))));
    const float v_new = std::fma(sc.one_minus_beta2 * g, g, vi * sc.beta2);
    const uint32_t active = in.active[j];
    v[j] = float_of(select(active, bits_of(v_new), bits_of(vi)));
    // One square root for the step and for v's encoding: an active lane's v is v_new.
    root[j] = std::sqrt(v[j]);
    const float denom = root[j] / sc.bc2_sqrt + sc.eps;
    const float p_new = decayed + sc.neg_step_size * m_new / denom;
    m[j] = float_of(select(active, bits_of(m_new), bits_of(mi)));
    p[j] = float_of(select(active, bits_of(p_new), bits_of(before[j])));
    // fp32_q8: p + update rounded back to p (the update under half an fp32 ulp of the master).
    lost += active & fp32_master & static_cast<uint32_t>(p_new == before[j]) &
            static_cast<uint32_t>(m_new != 0.0f) & static_cast<uint32_t>(p_new == decayed);
    updated += active & 1u;
  }

  // The new masters, and their bf16 copy (the decoded master rounded to nearest).
  alignas(64) uint32_t copy[K];
  if (format == OptimizerStateFormat::Fp32Q8) {
    for (size_t j = 0; j < K; ++j) copy[j] = bf16_nearest(bits_of(p[j]));
    copy_lanes(s.master + b, p, count);
  } else if (format == OptimizerStateFormat::Bf16C8Q8) {
    alignas(64) uint32_t encoded[K];
    for (size_t j = 0; j < K; ++j) encoded[j] = encode_c8(p[j], uniform_from_bits(master_bits[j]));
    for (size_t j = 0; j < K; ++j) {
      const uint32_t kept =
          select(in.active[j], encoded[j], hi[j] | (static_cast<uint32_t>(comp[j]) & 0xffu) << 16);
      hi[j] = static_cast<uint16_t>(kept);
      comp[j] = static_cast<int8_t>(kept >> 16);
      copy[j] = bf16_nearest(bits_of(decode_c8(hi[j], comp[j])));
    }
    copy_lanes(s.master_bf16 + b, hi, count);
    copy_lanes(s.compensation + b, comp, count);
  } else {
    for (size_t j = 0; j < K; ++j) {
      // lean_adamw.cpp's bf16_stochastic: NaN and infinity keep f32_to_bf16's handling.
      const uint32_t pb = bits_of(p[j]);
      const uint32_t special = mask_if((pb & 0x7f800000u) == 0x7f800000u);
      const uint32_t rounded = select(special, bf16_nearest(pb), (pb + (master_bits[j] & 0xffffu)) >> 16);
      hi[j] = static_cast<uint16_t>(select(in.active[j], rounded, hi[j]));
      copy[j] = bf16_nearest(static_cast<uint32_t>(hi[j]) << 16);
    }
    copy_lanes(s.master_bf16 + b, hi, count);
  }
  if (bf16_out != nullptr) {
    for (size_t j = 0; j < K; ++j) out[j] = static_cast<uint16_t>(select(in.active[j], copy[j], out[j]));
    copy_lanes(bf16_out + b, out, count);
  }

  // Encode m to nearest (lean_adamw.cpp's quantize_m with u = 1/2).
  const float m_max = [&] {
    alignas(64) float magnitude[K];
    for (size_t j = 0; j < K; ++j) magnitude[j] = float_of(bits_of(m[j]) & 0x7fffffffu);
    return block_max(magnitude);
  }();
  const uint32_t m_usable = mask_if(usable_scale(m_max));
  const float m_inverse = 1.0f / m_max;
  for (size_t j = 0; j < K; ++j) {
    const uint32_t mb = bits_of(m[j]);
    const uint32_t code = m_usable & encode_f8<3>(float_of(mb & 0x7fffffffu) * m_inverse, 0.5f);
    mq[j] = static_cast<int8_t>(select(mask_if(mb >> 31 != 0), 0u - code, code));
  }
  // Encode sqrt(v), rounded stochastically (quantize_v with u from lean_random.h, purpose kRandomV);
  // a v > 0 never to 0.
  const float v_max = block_max(root);
  const uint32_t v_usable = mask_if(usable_scale(v_max));
  const float v_inverse = 1.0f / v_max;
  for (size_t j = 0; j < K; ++j) {
    const uint32_t code =
        encode_f8<4>(root[j] * v_inverse, uniform_from_bits(random_bits(c.key, b + j, kRandomV)));
    const uint32_t vb = bits_of(v[j]);
    const uint32_t nonzero = mask_if(vb != 0 && vb <= 0x7f800000u);
    vq[j] = static_cast<uint8_t>(v_usable & select(nonzero & mask_if(code == 0), 1u, code));
  }
  copy_lanes(s.m_q + b, mq, count);
  copy_lanes(s.v_q + b, vq, count);
  s.m_scale[block] = float_of(m_usable & bits_of(m_max));
  s.v_scale[block] = float_of(v_usable & bits_of(v_max));
  stats.updated += updated;
  stats.lost += lost;
}

}  // namespace ferry::lean
