// The lean AdamW's block kernel (optim/lean_kernel.h) as code for one instruction set: lean_kernel.cpp
// includes this file once per set, in a namespace of that name, under GCC's target pragma for it.
// No include guard, on purpose.
//
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

namespace FERRY_LEAN_TARGET {

constexpr size_t K = kStateBlock;

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
  // e < 0 only below the smallest code (b >= xb), where the small code is chosen instead.
  const int32_t e = static_cast<int32_t>(b >> 23) - 127 + 15;
  const uint32_t code = select(mask_if(e > 15), 15u << kMant | ((1u << kMant) - 1),
                               static_cast<uint32_t>(e) << kMant | ((b >> kDropped) & ((1u << kMant) - 1)));
  return positive & select(small, small_code, code);
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
  // units == 128: hi + ulp / 2 is the next bf16 less 128 units, or 64 of the next binade's where
  // the ulp doubles (the scalar encoder computes these differences, exact in fp32); past the
  // largest bf16 (the next is infinity) its difference is -infinity, which converts to c = 0.
  const uint32_t h_up = h + 1;
  const uint32_t same_ulp = mask_if(ulp_exponent(h_up) == e);
  const uint32_t units_up = select(mask_if(h_up == 0x7f80u), 0u,
                                   select(same_ulp, static_cast<uint32_t>(-128), static_cast<uint32_t>(-64)));
  const uint32_t carry = mask_if(units == 128);
  const uint32_t hi = select(carry, h_up, h) | (xb >> 16 & 0x8000u);
  const uint32_t c =
      static_cast<uint32_t>(select(carry, static_cast<uint32_t>(units_up), static_cast<uint32_t>(units))) &
      0xffu;
  return select(finite, hi | c << 16, bf16_nearest(xb));
}

// One block's work on kStateBlock lanes of each array: the unit's own for a whole block, a padded
// copy for a partial one. kMasked: some lanes are inactive (in.active, in.decay say which); else
// every lane is updated with in.decay_all, and the choices fold away. Two passes over the lanes:
// decode, update and encode the master (with its bf16 copy into `out`) while the block's largest
// |m| and sqrt(v) are taken; then m and v are encoded against them.
template <OptimizerStateFormat F, bool kMasked>
[[gnu::always_inline]] inline void update_lanes(float* __restrict master, uint16_t* __restrict hi,
                                                int8_t* __restrict comp, int8_t* __restrict mq,
                                                uint8_t* __restrict vq, uint16_t* __restrict out,
                                                float* __restrict m_scale, float* __restrict v_scale,
                                                const BlockInput& in, const StepConstants& c, uint32_t span,
                                                uint32_t first_index, LeanStepStats& stats) {
  const AdamWScalars& sc = c.sc;
  const bool small_lerp = sc.lerp_weight < 0.5f;
  const float lerp_coef = small_lerp ? sc.lerp_weight : sc.lerp_weight - 1.0f;
  const uint32_t small_lerp_mask = mask_if(small_lerp);
  const uint32_t uniform_decay = bits_of(in.decay_all ? sc.decay_factor : 1.0f);
  const float m_in = *m_scale, v_in = *v_scale;
  alignas(64) float m[K], root[K];
  alignas(64) uint32_t v_random[K];
  uint32_t m_max = 0, v_max = 0;
  uint32_t lost = 0, updated = 0;
  for (size_t j = 0; j < K; ++j) {
    const uint32_t active = kMasked ? in.active[j] : ~0u;
    const uint32_t random = random_bits(span, first_index + static_cast<uint32_t>(j));
    // Decode (lean_adamw.cpp's dequantize_m, dequantize_v, the master's decoding).
    const int32_t qs = mq[j];
    const uint32_t qm = static_cast<uint32_t>(qs < 0 ? -qs : qs);
    const float mi = float_of(bits_of(decode_f8<3>(qm) * m_in) ^ (qs < 0 ? 0x80000000u : 0u));
    const float ri = decode_f8<4>(vq[j]) * v_in;
    const float vi = ri * ri;
    float before;
    if constexpr (F == OptimizerStateFormat::Fp32Q8)
      before = master[j];
    else if constexpr (F == OptimizerStateFormat::Bf16C8Q8)
      before = decode_c8(hi[j], comp[j]);
    else
      before = float_of(static_cast<uint32_t>(hi[j]) << 16);
    // adamw.cpp's update_loop, operation for operation but for the multiply by 1 / bc2_sqrt.
    const float g = in.grad[j] * c.grad_scale;
    const uint32_t decay =
        kMasked ? select(in.decay[j], bits_of(sc.decay_factor), bits_of(1.0f)) : uniform_decay;
    const float decayed = before * float_of(decay);
    const float m_new =
        std::fma(lerp_coef, g - mi, float_of(select(small_lerp_mask, bits_of(mi), bits_of(g))));
    const float v_new = std::fma(sc.one_minus_beta2 * g, g, vi * sc.beta2);
    const float v_kept = float_of(select(active, bits_of(v_new), bits_of(vi)));
    // One square root for the step and for v's encoding: an active lane's v is v_new.
    const float r = std::sqrt(v_kept);
    const float denom = r * c.inverse_bc2_sqrt + sc.eps;
    const float p_new = decayed + sc.neg_step_size * m_new / denom;
    const float m_kept = float_of(select(active, bits_of(m_new), bits_of(mi)));
    const float p = float_of(select(active, bits_of(p_new), bits_of(before)));
    // fp32_q8: p + update rounded back to p (the update under half an fp32 ulp of the master).
    if constexpr (F == OptimizerStateFormat::Fp32Q8)
      lost += active & static_cast<uint32_t>(p_new == before) & static_cast<uint32_t>(m_new != 0.0f) &
              static_cast<uint32_t>(p_new == decayed);
    updated += active & 1u;

    // The new master, and its bf16 copy (the decoded master rounded to nearest).
    uint32_t copy;
    if constexpr (F == OptimizerStateFormat::Fp32Q8) {
      master[j] = p;
      copy = bf16_nearest(bits_of(p));
    } else if constexpr (F == OptimizerStateFormat::Bf16C8Q8) {
      const uint32_t encoded = encode_c8(p, uniform_from_bits16(purpose_bits(random, 0)));
      const uint32_t kept =
          kMasked ? select(active, encoded, hi[j] | (static_cast<uint32_t>(comp[j]) & 0xffu) << 16) : encoded;
      hi[j] = static_cast<uint16_t>(kept);
      comp[j] = static_cast<int8_t>(kept >> 16);
      copy = bf16_nearest(bits_of(decode_c8(kept & 0xffffu, static_cast<int8_t>(kept >> 16))));
    } else {
      // lean_adamw.cpp's bf16_stochastic: NaN and infinity keep f32_to_bf16's handling.
      const uint32_t pb = bits_of(p);
      const uint32_t special = mask_if((pb & 0x7f800000u) == 0x7f800000u);
      // bf16_nearest of an infinity or a NaN: its high half, a NaN quieted.
      const uint32_t nan_quiet = mask_if((pb & 0x7fffffffu) > 0x7f800000u) & 0x40u;
      const uint32_t rounded = select(special, (pb >> 16) | nan_quiet, (pb + purpose_bits(random, 0)) >> 16);
      const uint32_t kept = kMasked ? select(active, rounded, hi[j]) : rounded;
      hi[j] = static_cast<uint16_t>(kept);
      // bf16_nearest of a bf16 value: itself, a NaN quieted.
      copy = kept | (mask_if((kept & 0x7fffu) > 0x7f80u) & 0x40u);
    }
    out[j] = static_cast<uint16_t>(kMasked ? select(active, copy, out[j]) : copy);

    m[j] = m_kept;
    root[j] = r;
    v_random[j] = purpose_bits(random, 1);
    // The block's largest |m| and sqrt(v) by their bits, NaN and -0 counted as 0 (std::max over the
    // values skips NaN as these do); exact, so any lane order gives them.
    const uint32_t ma = bits_of(m_kept) & 0x7fffffffu;
    const uint32_t m_key = ma & mask_if(ma <= 0x7f800000u);
    m_max = m_max > m_key ? m_max : m_key;
    const uint32_t rb = bits_of(r);
    const uint32_t r_key = rb & mask_if(rb <= 0x7f800000u);
    v_max = v_max > r_key ? v_max : r_key;
  }

  // Encode m to nearest (lean_adamw.cpp's quantize_m with u = 1/2), and sqrt(v) rounded
  // stochastically (quantize_v with the high 16 random bits); a v > 0 never to 0.
  const uint32_t m_usable = mask_if(usable_scale(float_of(m_max)));
  const float m_inverse = 1.0f / float_of(m_max);
  const uint32_t v_usable = mask_if(usable_scale(float_of(v_max)));
  const float v_inverse = 1.0f / float_of(v_max);
  for (size_t j = 0; j < K; ++j) {
    const uint32_t mb = bits_of(m[j]);
    const uint32_t m_code = m_usable & encode_f8<3>(float_of(mb & 0x7fffffffu) * m_inverse, 0.5f);
    mq[j] = static_cast<int8_t>(select(mask_if(mb >> 31 != 0), 0u - m_code, m_code));
    const uint32_t v_code = encode_f8<4>(root[j] * v_inverse, uniform_from_bits16(v_random[j]));
    // v > 0 exactly where sqrt(v) > 0 (NaN, -0 and 0 have neither).
    const uint32_t rb = bits_of(root[j]);
    const uint32_t nonzero = mask_if(rb != 0 && rb <= 0x7f800000u);
    vq[j] = static_cast<uint8_t>(v_usable & select(nonzero & mask_if(v_code == 0), 1u, v_code));
  }
  *m_scale = float_of(m_usable & m_max);
  *v_scale = float_of(v_usable & v_max);
  stats.updated += updated;
  stats.lost += lost;
}

template <OptimizerStateFormat F>
[[gnu::always_inline]] inline void update_format(float* master, uint16_t* hi, int8_t* comp, int8_t* mq,
                                                 uint8_t* vq, uint16_t* out, float* m_scale, float* v_scale,
                                                 const BlockInput& in, const StepConstants& c, uint32_t span,
                                                 uint32_t first_index, bool masked, LeanStepStats& stats) {
  if (masked)
    update_lanes<F, true>(master, hi, comp, mq, vq, out, m_scale, v_scale, in, c, span, first_index, stats);
  else
    update_lanes<F, false>(master, hi, comp, mq, vq, out, m_scale, v_scale, in, c, span, first_index, stats);
}

[[gnu::always_inline]] inline void update_any(OptimizerStateFormat format, float* master, uint16_t* hi,
                                              int8_t* comp, int8_t* mq, uint8_t* vq, uint16_t* out,
                                              float* m_scale, float* v_scale, const BlockInput& in,
                                              const StepConstants& c, uint32_t span, uint32_t first_index,
                                              bool masked, LeanStepStats& stats) {
  switch (format) {
    case OptimizerStateFormat::Fp32Q8:
      update_format<OptimizerStateFormat::Fp32Q8>(master, hi, comp, mq, vq, out, m_scale, v_scale, in, c,
                                                  span, first_index, masked, stats);
      break;
    case OptimizerStateFormat::Bf16C8Q8:
      update_format<OptimizerStateFormat::Bf16C8Q8>(master, hi, comp, mq, vq, out, m_scale, v_scale, in, c,
                                                    span, first_index, masked, stats);
      break;
    default:
      update_format<OptimizerStateFormat::Bf16SrQ8>(master, hi, comp, mq, vq, out, m_scale, v_scale, in, c,
                                                    span, first_index, masked, stats);
  }
}

template <typename T>
T* at(T* base, size_t b) {
  return base == nullptr ? nullptr : base + b;
}

// The kernel of this instruction set: the block's work inlined whole, so that GCC vectorizes it.
[[gnu::flatten]] void update_block(const LeanUnitState& s, size_t b, size_t count, const BlockInput& in,
                                   const StepConstants& c, uint16_t* bf16_out, LeanStepStats& stats) {
  const size_t block = b / K;
  const uint32_t span = span_key(c.key, b);
  const uint32_t first = static_cast<uint32_t>(b);
  if (count == K) {
    // The unit's arrays in place; without a bf16 copy its lanes go to a scratch block.
    alignas(64) uint16_t scratch[K];
    update_any(s.format, at(s.master, b), at(s.master_bf16, b), at(s.compensation, b), s.m_q + b, s.v_q + b,
               bf16_out != nullptr ? bf16_out + b : scratch, s.m_scale + block, s.v_scale + block, in, c,
               span, first, !in.uniform, stats);
    return;
  }
  // The last block of a unit: its `count` elements in zero-padded lanes, the others inactive.
  alignas(64) float master[K] = {};
  alignas(64) uint16_t hi[K] = {}, out[K] = {};
  alignas(64) int8_t comp[K] = {}, mq[K] = {};
  alignas(64) uint8_t vq[K] = {};
  const auto copy_in = [count](auto* to, const auto* from) {
    if (from != nullptr) std::memcpy(to, from, count * sizeof(*to));
  };
  const auto copy_out = [count](auto* to, const auto* from) {
    if (to != nullptr) std::memcpy(to, from, count * sizeof(*from));
  };
  copy_in(master, at(s.master, b));
  copy_in(hi, at(s.master_bf16, b));
  copy_in(comp, at(s.compensation, b));
  copy_in(mq, s.m_q + b);
  copy_in(vq, s.v_q + b);
  copy_in(out, at(bf16_out, b));
  FERRY_ASSERT(!in.uniform, "a partial block's lanes past its count are inactive");
  update_any(s.format, master, hi, comp, mq, vq, out, s.m_scale + block, s.v_scale + block, in, c, span,
             first, true, stats);
  copy_out(at(s.master, b), master);
  copy_out(at(s.master_bf16, b), hi);
  copy_out(at(s.compensation, b), comp);
  copy_out(s.m_q + b, mq);
  copy_out(s.v_q + b, vq);
  copy_out(at(bf16_out, b), out);
}

// The kernel for a run of whole blocks that one segment names (optim/lean_kernel.h RunKernel): one
// call, so the constants of the block's work are set up once, not per block.
[[gnu::flatten]] void update_run(const LeanUnitState& s, size_t b, size_t blocks, const void* grad,
                                 size_t grad_first, bool grad_bf16, bool decay, const StepConstants& c,
                                 uint16_t* bf16_out, LeanStepStats& stats) {
  BlockInput in;
  in.uniform = true;
  in.decay_all = decay;
  if (grad == nullptr) std::fill(std::begin(in.grad), std::end(in.grad), 0.0f);
  alignas(64) uint16_t scratch[K];
  for (size_t k = 0; k < blocks; ++k) {
    const size_t first = b + k * K, block = first / K;
    // The block's gradients, read before its bf16 copy (maybe over them) is written.
    if (grad != nullptr && grad_bf16) {
      const uint16_t* g = static_cast<const uint16_t*>(grad) + grad_first + k * K;
      for (size_t j = 0; j < K; ++j) in.grad[j] = float_of(static_cast<uint32_t>(g[j]) << 16);
    } else if (grad != nullptr) {
      std::memcpy(in.grad, static_cast<const float*>(grad) + grad_first + k * K, sizeof(in.grad));
    }
    update_any(s.format, at(s.master, first), at(s.master_bf16, first), at(s.compensation, first),
               s.m_q + first, s.v_q + first, bf16_out != nullptr ? bf16_out + first : scratch,
               s.m_scale + block, s.v_scale + block, in, c, span_key(c.key, first),
               static_cast<uint32_t>(first), false, stats);
  }
}

}  // namespace FERRY_LEAN_TARGET
