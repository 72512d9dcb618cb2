// Compiled without FMA contraction (CMakeLists.txt), as adamw.cpp: the per-element arithmetic is the
// reference's, with its two fused multiply-adds explicit.

#include "optim/lean_adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/adamw_scalars.h"

namespace ferry {

namespace lean {

namespace {

// splitmix64's finalizer: a bijection that scatters every input bit over the output.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint32_t random32(uint64_t seed, int64_t step, size_t index, uint32_t purpose) {
  uint64_t h = mix(seed ^ 0x9e3779b97f4a7c15ull);
  h = mix(h ^ static_cast<uint64_t>(step) * 0xd1b54a32d192ed03ull);
  h = mix(h ^ (static_cast<uint64_t>(index) << 2 | purpose));
  return static_cast<uint32_t>(h >> 32);
}

float uniform(uint64_t seed, int64_t step, size_t index, uint32_t purpose) {
  return static_cast<float>(random32(seed, step, index, purpose) >> 8) * 0x1p-24f;
}

uint16_t bf16_stochastic(float x, uint32_t random16) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  // NaN and infinity keep f32_to_bf16's handling; adding to their low bits could change a NaN's
  // class. Magnitude bits plus a uniform 16-bit offset, truncated: up with probability frac.
  if ((bits & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(x);
  return static_cast<uint16_t>((bits + (random16 & 0xffffu)) >> 16);
}

namespace {

// The exponent E of hi's bf16 ulp (ulp = 2^E); zeros and subnormals share the smallest normal's.
// 2^k as a float for the k these encodings need (-149 <= k <= 127), without a libm call: normal
// powers from their exponent bits, subnormal ones (zeros' compensation units) by ldexp.
inline float pow2(int k) {
  if (k < -126) return std::ldexp(1.0f, k);
  const uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

int bf16_ulp_exponent(uint16_t hi) {
  const int e = (hi >> 7) & 0xff;
  return std::max(e, 1) - 127 - 7;
}

}  // namespace

void encode_compensated(float x, uint16_t* hi, int8_t* c, float u) {
  if (!std::isfinite(x)) {
    *hi = f32_to_bf16(x);
    *c = 0;
    return;
  }
  // On the magnitude, so that "up" is away from zero and the sign lives in hi alone.
  const float a = std::fabs(x);
  uint16_t h = f32_to_bf16(a);
  // a - bf16(a) is exact (the latter is a rounded to fewer bits), at most ulp / 2: in units of
  // ulp / 256 it lies in [-128, 128], and so does k.
  int E = bf16_ulp_exponent(h);
  const float k = std::floor((a - bf16_to_f32(h)) * pow2(8 - E) + u);
  int units = static_cast<int>(k);
  if (units == 128) {
    // hi + ulp / 2 is the next bf16 less 128 units (or 64 of the next binade's): int8 holds that.
    const float target = bf16_to_f32(h) + 128.0f * pow2(E - 8);
    h = static_cast<uint16_t>(h + 1);
    E = bf16_ulp_exponent(h);
    units = static_cast<int>((target - bf16_to_f32(h)) * pow2(8 - E));
  }
  *hi = static_cast<uint16_t>(h | (std::signbit(x) ? 0x8000u : 0u));
  *c = static_cast<int8_t>(units);
}

float decode_compensated(uint16_t hi, int8_t c) {
  // |hi| has 8 significant bits from 2^(E+7) down to 2^E, c * 2^(E-8) at most 8 from 2^(E-1) down
  // to 2^(E-8): the sum has 16 and is exact in fp32.
  const uint16_t h = hi & 0x7fffu;
  const float magnitude = bf16_to_f32(h) + static_cast<float>(c) * pow2(bf16_ulp_exponent(h) - 8);
  return (hi & 0x8000u) ? -magnitude : magnitude;
}

namespace {

// x in [0, 1] as an 8-bit float of `mant` mantissa bits and (8 - mant) exponent bits below 1
// (code = exponent field << mant | mantissa; value = (1 + M / 2^mant) * 2^(E - 15) for E = 0..15
// with 4 exponent bits), rounded stochastically with `u` in [0, 1). Code 0 is zero; below the
// smallest nonzero code x rounds to it or to zero, unbiased.
uint8_t encode_f8(float x, int mant, float u) {
  const float smallest = (1.0f + pow2(-mant)) * pow2(-15);
  if (!(x > 0.0f)) return 0;
  if (x < smallest) return u < x / smallest ? 1 : 0;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int dropped = 23 - mant;
  bits += static_cast<uint32_t>(u * static_cast<float>(1u << dropped)) & ((1u << dropped) - 1);
  const int e = static_cast<int>(bits >> 23) - 127 + 15;
  const uint32_t m = (bits >> dropped) & ((1u << mant) - 1);
  if (e > 15) return static_cast<uint8_t>(15u << mant | ((1u << mant) - 1));  // only rounding past 1.999
  return static_cast<uint8_t>(static_cast<uint32_t>(e) << mant | m);
}

float decode_f8(uint8_t code, int mant) {
  if (code == 0) return 0.0f;
  const int e = code >> mant;
  const float m = static_cast<float>(code & ((1u << mant) - 1));
  return (1.0f + m * pow2(-mant)) * pow2(e - 15);
}

constexpr int kMantM = 3;  // m: sign + e4m3 of |m| / max|m|
constexpr int kMantV = 4;  // v: e4m4 of sqrt(v) / max sqrt(v)

}  // namespace

float quantize_m(const float* m, size_t count, const float* u, int8_t* q) {
  float absmax = 0.0f;
  for (size_t i = 0; i < count; ++i) absmax = std::max(absmax, std::fabs(m[i]));
  const bool usable = absmax > 0.0f && std::isfinite(absmax);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t code = usable ? encode_f8(std::fabs(m[i]) / absmax, kMantM, u[i]) : 0;
    q[i] = static_cast<int8_t>(m[i] < 0.0f ? -static_cast<int>(code) : static_cast<int>(code));
  }
  return usable ? absmax : 0.0f;
}

float quantize_v(const float* v, size_t count, const float* u, uint8_t* q) {
  float rootmax = 0.0f;
  for (size_t i = 0; i < count; ++i) rootmax = std::max(rootmax, std::sqrt(v[i]));
  const bool usable = rootmax > 0.0f && std::isfinite(rootmax);
  for (size_t i = 0; i < count; ++i) {
    q[i] = usable ? encode_f8(std::sqrt(v[i]) / rootmax, kMantV, u[i]) : 0;
    if (usable && v[i] > 0.0f && q[i] == 0) q[i] = 1;  // never read back as zero (a step divides by sqrt(v))
  }
  return usable ? rootmax : 0.0f;
}

float dequantize_m(int8_t q, float scale) {
  const float magnitude = decode_f8(static_cast<uint8_t>(q < 0 ? -q : q), kMantM) * scale;
  return q < 0 ? -magnitude : magnitude;
}

float dequantize_v(uint8_t q, float scale) {
  const float root = decode_f8(q, kMantV) * scale;
  return root * root;
}

}  // namespace lean

namespace {

// The purpose of the masters' random numbers (lean_unit_seed uses another).
constexpr uint32_t kRandomMaster = 0;

float read_master(const LeanUnitState& s, size_t i) {
  switch (s.format) {
    case OptimizerStateFormat::Fp32Q8:
      return s.master[i];
    case OptimizerStateFormat::Bf16C8Q8:
      return lean::decode_compensated(s.master_bf16[i], s.compensation[i]);
    default:
      return bf16_to_f32(s.master_bf16[i]);
  }
}

// Stores the new master of element i. Returns false where an update was lost to rounding with no
// help: the fp32 master of fp32_q8 rounds to nearest, so `value` == the old master although the
// update was not zero (the caller knows); the stochastically rounded masters lose nothing on average.
bool write_master(const LeanUnitState& s, size_t i, float value, int64_t step) {
  switch (s.format) {
    case OptimizerStateFormat::Fp32Q8: {
      const bool changed = s.master[i] != value;
      s.master[i] = value;
      return changed;
    }
    case OptimizerStateFormat::Bf16C8Q8: {
      lean::encode_compensated(value, &s.master_bf16[i], &s.compensation[i],
                               lean::uniform(s.seed, step, i, kRandomMaster));
      return true;
    }
    default:
      s.master_bf16[i] = lean::bf16_stochastic(value, lean::random32(s.seed, step, i, kRandomMaster));
      return true;
  }
}

// The step's per-element inputs for one block: gradient (fp32, unscaled) and weight decay.
struct BlockInput {
  float grad[kStateBlock];
  bool decay[kStateBlock];
  bool active[kStateBlock];  // named by a segment (others keep their value)
};

// Block [b, b + count) of the unit: decode, the reference's AdamW on the active elements, encode.
// flatten: every call inside is inlined, so the x86-64-v3 clone (AVX2, FMA: std::fma one instruction,
// floor one vroundss) covers the whole per-element work; the default clone runs elsewhere, with the
// same IEEE results (std::fma is exact in software too).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
[[gnu::flatten, gnu::target_clones("arch=haswell", "default")]]
#endif
void update_block(const LeanUnitState& s, size_t b, size_t count, const BlockInput& in, const AdamWScalars& sc,
                  float grad_scale, int64_t step, uint16_t* bf16_out, LeanStepStats& stats) {
  const size_t block = b / kStateBlock;
  float m[kStateBlock], v[kStateBlock], u[kStateBlock];
  const bool small_lerp = sc.lerp_weight < 0.5f;
  const float lerp_coef = small_lerp ? sc.lerp_weight : sc.lerp_weight - 1.0f;
  for (size_t j = 0; j < count; ++j) {
    const size_t i = b + j;
    m[j] = lean::dequantize_m(s.m_q[i], s.m_scale[block]);
    v[j] = lean::dequantize_v(s.v_q[i], s.v_scale[block]);
    if (!in.active[j]) continue;
    // adamw.cpp's update_loop, operation for operation.
    const float g = in.grad[j] * grad_scale;
    const float before = read_master(s, i);
    float p = before * (in.decay[j] ? sc.decay_factor : 1.0f);
    const float decayed = p;
    const float m_new = std::fma(lerp_coef, g - m[j], small_lerp ? m[j] : g);
    const float vi = std::fma(sc.one_minus_beta2 * g, g, v[j] * sc.beta2);
    const float denom = std::sqrt(vi) / sc.bc2_sqrt + sc.eps;
    p = p + sc.neg_step_size * m_new / denom;
    m[j] = m_new;
    v[j] = vi;
    const bool changed = write_master(s, i, p, step);
    ++stats.updated;
    // fp32_q8: p + update rounded back to p (the update under half an fp32 ulp of the master).
    if (!changed && m_new != 0.0f && p == decayed) ++stats.lost;
    if (bf16_out != nullptr) {
      const float stored = read_master(s, i);
      bf16_out[i] = f32_to_bf16(stored);
    }
  }
  // Moments round to nearest (u = 1/2), see lean_adamw.h.
  std::fill(u, u + count, 0.5f);
  s.m_scale[block] = lean::quantize_m(m, count, u, s.m_q + b);
  s.v_scale[block] = lean::quantize_v(v, count, u, s.v_q + b);
}

float load_grad(const void* grad, DType dtype, size_t k) {
  return dtype == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(grad)[k])
                              : static_cast<const float*>(grad)[k];
}

// Blocks below this many are updated on the calling thread.
constexpr size_t kGrainBlocks = 512;

}  // namespace

std::string lost_updates_warning(OptimizerStateFormat format, const LeanStepStats& stats,
                                 const std::string& unit, int64_t step) {
  return fmt::format(
      "optimizer_state {}: at step {}, {} of the {} updates of {} were under half an ulp of their fp32 "
      "master and were lost to its nearest rounding (said once); if that persists, the learning rate is too "
      "small for the weights' size in this format: a bf16 format with stochastic rounding (bf16sr_q8, "
      "bf16c8_q8) keeps such updates on average",
      state_format_name(format), step, stats.lost, stats.updated, unit);
}

uint64_t lean_unit_seed(uint64_t run_seed, size_t unit) {
  return (static_cast<uint64_t>(lean::random32(run_seed, 0, unit, 3)) << 32) |
         lean::random32(run_seed, 1, unit, 3);
}

LeanUnitState lean_unit_view(OptimizerStateFormat format, size_t numel, std::span<void* const> arrays,
                             uint64_t seed) {
  FERRY_ASSERT(!is_exact(format), "fp32 state is not a lean format");
  const std::vector<StateArraySpec> specs = state_arrays(format);
  FERRY_ASSERT(arrays.size() == specs.size(), "one base address per state array");
  LeanUnitState s;
  s.format = format;
  s.numel = numel;
  s.seed = seed;
  bool first_moment = true, first_scale = true;
  for (size_t k = 0; k < specs.size(); ++k) {
    void* a = arrays[k];
    switch (specs[k].kind) {
      case StateArrayKind::MasterF32:
        s.master = static_cast<float*>(a);
        break;
      case StateArrayKind::MasterBf16:
        s.master_bf16 = static_cast<uint16_t*>(a);
        break;
      case StateArrayKind::Compensation8:
        s.compensation = static_cast<int8_t*>(a);
        break;
      case StateArrayKind::MomentQ8:
        if (first_moment)
          s.m_q = static_cast<int8_t*>(a);
        else
          s.v_q = static_cast<uint8_t*>(a);
        first_moment = false;
        break;
      case StateArrayKind::BlockScaleF32:
        (first_scale ? s.m_scale : s.v_scale) = static_cast<float*>(a);
        first_scale = false;
        break;
      case StateArrayKind::MomentF32:
        FERRY_ASSERT(false, "lean formats keep 8-bit moments");
    }
  }
  return s;
}

void lean_read_masters(const LeanUnitState& s, float* out, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) out[i - begin] = read_master(s, i);
}

void lean_write_masters(const LeanUnitState& s, const float* in, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const float x = in[i - begin];
    switch (s.format) {
      case OptimizerStateFormat::Fp32Q8:
        s.master[i] = x;
        break;
      case OptimizerStateFormat::Bf16C8Q8:
        lean::encode_compensated(x, &s.master_bf16[i], &s.compensation[i], 0.5f);
        break;
      default:
        s.master_bf16[i] = f32_to_bf16(x);
    }
  }
}

LeanStepStats lean_adamw_step(const LeanUnitState& s, std::span<const AdamWSegment> segments,
                              const void* grad, DType grad_dtype, uint16_t* bf16_out, const AdamWHyper& hyper,
                              int64_t step, float grad_scale, ThreadPool& pool) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  FERRY_ASSERT(grad_dtype == DType::F32 || grad_dtype == DType::BF16, "gradients are F32 or BF16");
  if (segments.empty()) return {};
  const AdamWScalars sc = adamw_scalars(hyper, step);
  const size_t first = segments.front().offset / kStateBlock;
  const size_t last = (segments.back().offset + segments.back().count + kStateBlock - 1) / kStateBlock;
  std::atomic<size_t> updated{0}, lost{0};
  pool.parallel_for(
      last - first,
      [&](size_t lo, size_t hi) {
        LeanStepStats stats;
        BlockInput in;
        size_t seg = 0;
        for (size_t k = first + lo; k < first + hi; ++k) {
          const size_t b = k * kStateBlock;
          const size_t count = std::min(kStateBlock, s.numel - b);
          while (seg < segments.size() && segments[seg].offset + segments[seg].count <= b) ++seg;
          size_t t = seg;
          for (size_t j = 0; j < count; ++j) {
            const size_t i = b + j;
            while (t < segments.size() && segments[t].offset + segments[t].count <= i) ++t;
            in.active[j] = t < segments.size() && segments[t].offset <= i;
            in.decay[j] = in.active[j] && segments[t].decay;
            // Read before bf16_out (possibly the same buffer) is written.
            in.grad[j] = in.active[j] ? load_grad(grad, grad_dtype, i) : 0.0f;
          }
          update_block(s, b, count, in, sc, grad_scale, step, bf16_out, stats);
        }
        updated += stats.updated;
        lost += stats.lost;
      },
      kGrainBlocks);
  return {updated.load(), lost.load()};
}

LeanStepStats lean_adamw_rows(const LeanUnitState& s, size_t row_len, std::span<const int32_t> rows,
                              bool decay, const void* grad, DType grad_dtype, uint16_t* bf16_out,
                              const AdamWHyper& hyper, int64_t step, float grad_scale, ThreadPool& pool) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  FERRY_ASSERT(row_len % kStateBlock == 0, "rows of whole quantization blocks");
  FERRY_ASSERT(grad == nullptr || grad != static_cast<const void*>(bf16_out),
               "gathered row gradients must not share the buffer of the bf16 copy");
  if (rows.empty() || row_len == 0) return {};
  const AdamWScalars sc = adamw_scalars(hyper, step);
  const size_t blocks_per_row = row_len / kStateBlock;
  std::atomic<size_t> updated{0}, lost{0};
  pool.parallel_for(
      rows.size(),
      [&](size_t lo, size_t hi) {
        LeanStepStats stats;
        BlockInput in;
        std::fill(std::begin(in.active), std::end(in.active), true);
        std::fill(std::begin(in.decay), std::end(in.decay), decay);
        for (size_t k = lo; k < hi; ++k) {
          const size_t row = static_cast<size_t>(rows[k]) * row_len;
          for (size_t q = 0; q < blocks_per_row; ++q) {
            for (size_t j = 0; j < kStateBlock; ++j)
              in.grad[j] =
                  grad == nullptr ? 0.0f : load_grad(grad, grad_dtype, k * row_len + q * kStateBlock + j);
            update_block(s, row + q * kStateBlock, kStateBlock, in, sc, grad_scale, step, bf16_out, stats);
          }
        }
        updated += stats.updated;
        lost += stats.lost;
      },
      std::max<size_t>(1, kGrainBlocks / blocks_per_row));
  return {updated.load(), lost.load()};
}

}  // namespace ferry
