// The scalar encoders (the reference of the block kernel, optim/lean_kernel.cpp), the masters'
// reads and writes, and the thread split of a step. Compiled without FMA contraction
// (CMakeLists.txt), as adamw.cpp.

#include "optim/lean_adamw.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/adamw_scalars.h"
#include "optim/lean_kernel.h"
#include "optim/lean_random.h"

namespace ferry {

namespace lean {

uint32_t random16(uint64_t seed, int64_t step, size_t index, uint32_t purpose) {
  const uint64_t key = random_key(seed, step);
  return purpose_bits(random_bits(span_key(key, index), index), purpose);
}

float uniform(uint64_t seed, int64_t step, size_t index, uint32_t purpose) {
  return uniform_from_bits16(random16(seed, step, index, purpose));
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
  if (x < smallest) return u * smallest < x ? 1 : 0;
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
  // One division per block: the elements are scaled by the reciprocal (a product may exceed 1 by
  // an ulp; it still rounds to the code of 1).
  const float inverse = 1.0f / absmax;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t code = usable ? encode_f8(std::fabs(m[i]) * inverse, kMantM, u[i]) : 0;
    q[i] = static_cast<int8_t>(m[i] < 0.0f ? -static_cast<int>(code) : static_cast<int>(code));
  }
  return usable ? absmax : 0.0f;
}

float quantize_v(const float* v, size_t count, const float* u, uint8_t* q) {
  float rootmax = 0.0f;
  for (size_t i = 0; i < count; ++i) rootmax = std::max(rootmax, std::sqrt(v[i]));
  const bool usable = rootmax > 0.0f && std::isfinite(rootmax);
  const float inverse = 1.0f / rootmax;
  for (size_t i = 0; i < count; ++i) {
    q[i] = usable ? encode_f8(std::sqrt(v[i]) * inverse, kMantV, u[i]) : 0;
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

// Gradients [first, first + count) as fp32 into out[0, count).
void load_grads(const void* grad, DType dtype, size_t first, size_t count, float* out) {
  if (dtype == DType::BF16) {
    const uint16_t* g = static_cast<const uint16_t*>(grad) + first;
    for (size_t j = 0; j < count; ++j) out[j] = bf16_to_f32(g[j]);
  } else {
    std::memcpy(out, static_cast<const float*>(grad) + first, count * sizeof(float));
  }
}

// Block [b, b + count)'s inputs from the segments, the first of which may reach into it being
// segments[seg]. Most blocks lie inside one segment: all their lanes are active alike.
void block_input(std::span<const AdamWSegment> segments, size_t seg, size_t b, size_t count, const void* grad,
                 DType grad_dtype, lean::BlockInput& in) {
  const bool inside = seg < segments.size() && segments[seg].offset <= b &&
                      b + count <= segments[seg].offset + segments[seg].count;
  if (inside && count == kStateBlock) {
    in.uniform = true;
    in.decay_all = segments[seg].decay;
    load_grads(grad, grad_dtype, b, count, in.grad);
    return;
  }
  in = lean::BlockInput{};
  if (inside) {
    const uint32_t decay = segments[seg].decay ? ~0u : 0u;
    for (size_t j = 0; j < count; ++j) {
      in.active[j] = ~0u;
      in.decay[j] = decay;
    }
    load_grads(grad, grad_dtype, b, count, in.grad);
    return;
  }
  for (size_t j = 0, t = seg; j < count; ++j) {
    const size_t i = b + j;
    while (t < segments.size() && segments[t].offset + segments[t].count <= i) ++t;
    if (t == segments.size() || segments[t].offset > i) continue;
    in.active[j] = ~0u;
    in.decay[j] = segments[t].decay ? ~0u : 0u;
    load_grads(grad, grad_dtype, i, 1, &in.grad[j]);
  }
}

// Blocks below this many are updated on the calling thread.
constexpr size_t kGrainBlocks = 512;
// The pool's threads take pieces of this many blocks (64Ki elements, ~0.2 ms of a thread's work)
// from a shared counter (ThreadPool::for_each_piece): a static slice per thread made a step as slow
// as its slowest thread, and measured 74% of the threads' time busy on the H200 host's 16 threads
// (the fp32 pass, which took pieces already, 96%).
constexpr size_t kPieceBlocks = 1024;

// Runs body(lo, hi) over [0, items) in pieces of `piece` items, on the pool's threads when the
// work (blocks_per_item blocks an item) is enough to wake them.
void for_each_range(ThreadPool& pool, size_t items, size_t piece, size_t blocks_per_item,
                    const std::function<void(size_t, size_t)>& body) {
  if (items * blocks_per_item < kGrainBlocks || pool.size() == 1) {
    body(0, items);
    return;
  }
  pool.for_each_piece((items + piece - 1) / piece,
                      [&](size_t k) { body(k * piece, std::min(items, (k + 1) * piece)); });
}

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
  // The 32 high bits of splitmix64 over (run seed, 0 or 1, unit) (the bits of the first random
  // numbers of the lean formats, kept so that a unit's stream is what it was).
  const auto half = [&](int64_t which) {
    return lean::mix64(lean::random_key(run_seed, which) ^ (static_cast<uint64_t>(unit) << 2 | 3)) >> 32;
  };
  return half(0) << 32 | half(1);
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
  const lean::StepConstants c{adamw_scalars(hyper, step), grad_scale, lean::random_key(s.seed, step)};
  const size_t first = segments.front().offset / kStateBlock;
  const size_t last = (segments.back().offset + segments.back().count + kStateBlock - 1) / kStateBlock;
  const lean::BlockKernel update_block = lean::block_kernel();
  const lean::RunKernel update_run = lean::run_kernel();
  std::atomic<size_t> updated{0}, lost{0};
  for_each_range(pool, last - first, kPieceBlocks, 1, [&](size_t lo, size_t hi) {
    LeanStepStats stats;
    lean::BlockInput in;
    size_t seg = 0;
    for (size_t k = first + lo; k < first + hi;) {
      const size_t b = k * kStateBlock;
      while (seg < segments.size() && segments[seg].offset + segments[seg].count <= b) ++seg;
      // The whole blocks from here that segments[seg] names, in one call.
      if (seg < segments.size() && segments[seg].offset <= b) {
        const size_t end = std::min(segments[seg].offset + segments[seg].count, s.numel) / kStateBlock;
        const size_t run_end = std::min(first + hi, end);
        if (run_end > k) {
          update_run(s, b, run_end - k, grad, b, grad_dtype == DType::BF16, segments[seg].decay, c, bf16_out,
                     stats);
          k = run_end;
          continue;
        }
      }
      const size_t count = std::min(kStateBlock, s.numel - b);
      // The gradients are read before bf16_out (possibly the same buffer) is written.
      block_input(segments, seg, b, count, grad, grad_dtype, in);
      update_block(s, b, count, in, c, bf16_out, stats);
      ++k;
    }
    updated += stats.updated;
    lost += stats.lost;
  });
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
  const lean::StepConstants c{adamw_scalars(hyper, step), grad_scale, lean::random_key(s.seed, step)};
  const size_t blocks_per_row = row_len / kStateBlock;
  const lean::RunKernel update_run = lean::run_kernel();
  std::atomic<size_t> updated{0}, lost{0};
  // Pieces of whole rows, about kPieceBlocks blocks each.
  const size_t piece_rows = std::max<size_t>(1, kPieceBlocks / blocks_per_row);
  const auto run_rows = [&](size_t lo, size_t hi) {
    LeanStepStats stats;
    for (size_t k = lo; k < hi; ++k)
      update_run(s, static_cast<size_t>(rows[k]) * row_len, blocks_per_row, grad, k * row_len,
                 grad_dtype == DType::BF16, decay, c, bf16_out, stats);
    updated += stats.updated;
    lost += stats.lost;
  };
  for_each_range(pool, rows.size(), piece_rows, blocks_per_row, run_rows);
  return {updated.load(), lost.load()};
}

}  // namespace ferry
