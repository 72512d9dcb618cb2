// AdamW over a unit whose state is in a lean format (optim/state_format.h): the same fp32
// arithmetic per element as adamw_step (optim/adamw.h), on a master and moments that are decoded
// before and encoded after each update. Opt-in and approximate; fp32 stays on cpu_adamw.
//
// Numerics, per element i of a unit (indices count from the unit's first element):
//  * 8-bit m and v: per block of kStateBlock elements one fp32 scale, and per element an 8-bit
//    float relative to it: m as sign + e4m3 of |m| / max|m| (4 significant bits over 15 binades),
//    v as e4m4 of sqrt(v) / max sqrt(v) (5 significant bits over 15 binades of sqrt(v), 30 of v).
//    A linear 8-bit code would read an element 1000 times below its block's largest as 0 or one
//    step (gradients differ that much within a row); a float code keeps its 4-5 bits. A v > 0
//    never encodes as 0: an AdamW step divides by sqrt(v), and a zero read back would make the
//    step m / eps. m rounds to nearest (within half a code step, 6%, at every read): it moves by
//    10% of (g - m) per step, more than half a code step, so its code follows it. v rounds
//    stochastically: a step moves sqrt(v) by about 0.05% per unit of g^2 / v (beta2 = 0.999),
//    never half a code step (1.5-3%), so to nearest an element's v would keep its code and move
//    only with its block's scale, an early noisy value frozen, with steps larger than AdamW's on
//    average (1 / sqrt(v) is convex). Rounded up with probability p (the fraction of a code step
//    it lies above the lower code), E[v] is AdamW's; the variance a step adds is p(1 - p) code
//    steps^2, at most the step's movement in code steps (from a code, p or 1 - p is that
//    movement), so over v's memory the noise is a few code steps.
//    docs/optimizer_state.md has the measurements.
//  * bf16sr: the master is bf16, rounded stochastically after each update: E[master] is the fp32
//    result, so updates far below bf16's resolution (2^-8 relative) still move it on average.
//  * bf16c8: the master is bf16 hi (nearest) plus an int8 c in [-128, 127]: value = hi + c *
//    ulp(hi) / 256, exact in fp32 (a 16-bit significand), c rounded stochastically:
//    |value - fp32 result| < ulp(hi) / 256 and unbiased. Rounded to nearest instead, a steady update of 3.3
//    units of ulp/256 would lose 0.3 of them every step (9% of the movement); stochastically it loses nothing
//    on average and the error is a random walk (optim_lean_adamw_test: 1000 updates stay within 0.3 bf16
//    ulp).
//  * fp32_q8: the fp32 master exactly as adamw_step (nearest rounding); only m and v are 8-bit. An
//    update under half an fp32 ulp of its master is lost, and counted (LeanStepStats::lost) so the
//    run can warn.
//
// Every random number is a hash of (seed, step, element index) (optim/lean_random.h: 32 bits per
// element, 16 for each rounding), so the result does not depend on how the work is split over
// threads or which tier holds the arrays: the sliding engine and the plain trainer produce the same
// bits, and a resumed run continues as an unbroken one.
//
// Speed: the work of a block runs in optim/lean_kernel.cpp, vectorized (an AVX-512 or AVX2 kernel),
// bit-identical to the scalar encoders below (tests/optim_lean_adamw_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "optim/adamw.h"
#include "optim/cpu_adamw.h"
#include "optim/state_format.h"

namespace ferry {

// Views of one unit's lean state arrays (state_arrays(format), in that order).
struct LeanUnitState {
  OptimizerStateFormat format = OptimizerStateFormat::Fp32Q8;
  size_t numel = 0;
  uint64_t seed = 0;                // the unit's stream of random numbers (lean_unit_seed)
  float* master = nullptr;          // fp32_q8
  uint16_t* master_bf16 = nullptr;  // bf16c8_q8, bf16sr_q8
  int8_t* compensation = nullptr;   // bf16c8_q8
  int8_t* m_q = nullptr;            // (numel)
  float* m_scale = nullptr;         // (blocks)
  uint8_t* v_q = nullptr;           // (numel) sqrt(v) quantized
  float* v_scale = nullptr;         // (blocks)
};

// The views of a unit's arrays, given their base addresses in state_arrays(format) order (each at
// least state_array_bytes long). The format must not be fp32.
LeanUnitState lean_unit_view(OptimizerStateFormat format, size_t numel, std::span<void* const> arrays,
                             uint64_t seed);
// The run's seed mixed with a unit's index: one independent stream per unit.
uint64_t lean_unit_seed(uint64_t run_seed, size_t unit);

// The masters as fp32 (decoded), elements [begin, end).
void lean_read_masters(const LeanUnitState& s, float* out, size_t begin, size_t end);
// Sets the masters from fp32 values (nearest rounding: loading a model is not an update).
void lean_write_masters(const LeanUnitState& s, const float* in, size_t begin, size_t end);

struct LeanStepStats {
  size_t updated = 0;  // elements updated
  size_t lost = 0;     // of which the update was lost to the master's rounding (fp32_q8 only)
};

// One AdamW step over the elements the segments name, as cpu_adamw_step: master and moments
// updated in place, bf16(new master) into `bf16_out` when given (it may be the bf16 gradient
// buffer itself, as in cpu_adamw.h). The blocks of kStateBlock elements the segments touch are
// re-encoded whole; elements of such a block outside every segment keep their value up to its
// re-encoding.
LeanStepStats lean_adamw_step(const LeanUnitState& s, std::span<const AdamWSegment> segments,
                              const void* grad, DType grad_dtype, uint16_t* bf16_out, const AdamWHyper& hyper,
                              int64_t step, float grad_scale, ThreadPool& pool = ThreadPool::global());

// The warning a run logs once, the first time a step's updates were lost (stats.lost > 0).
std::string lost_updates_warning(OptimizerStateFormat format, const LeanStepStats& stats,
                                 const std::string& unit, int64_t step);

// The same over whole rows of `row_len` elements (a multiple of kStateBlock), as cpu_adamw_rows:
// row rows[k] takes its gradient from row k of `grad`, or a zero gradient when grad is null.
LeanStepStats lean_adamw_rows(const LeanUnitState& s, size_t row_len, std::span<const int32_t> rows,
                              bool decay, const void* grad, DType grad_dtype, uint16_t* bf16_out,
                              const AdamWHyper& hyper, int64_t step, float grad_scale,
                              ThreadPool& pool = ThreadPool::global());

// The encodings on their own, for tests and references.
namespace lean {
// The 16 random bits of (seed, step, index) for `purpose` (0: the master's rounding, 1: v's;
// optim/lean_random.h), and a uniform number in (0, 1) from them.
uint32_t random16(uint64_t seed, int64_t step, size_t index, uint32_t purpose);
float uniform(uint64_t seed, int64_t step, size_t index, uint32_t purpose);
// bf16 of x rounded stochastically with 16 random bits: up with probability (x - down) / ulp.
uint16_t bf16_stochastic(float x, uint32_t random16);
// bf16 hi + int8 compensation of x, the compensation rounded down after adding u (u uniform in
// [0, 1): stochastic rounding; u = 0.5: nearest), and back.
void encode_compensated(float x, uint16_t* hi, int8_t* c, float u);
float decode_compensated(uint16_t hi, int8_t c);
// One block of m (count <= kStateBlock values) to 8 bits and its scale (max |m|), and v's (max
// sqrt(v)); `u` supplies the rounding randoms (one per element in [0, 1)). The elements are
// scaled by the reciprocal of the block's scale (one division per block).
float quantize_m(const float* m, size_t count, const float* u, int8_t* q);
float quantize_v(const float* v, size_t count, const float* u, uint8_t* q);
float dequantize_m(int8_t q, float scale);
float dequantize_v(uint8_t q, float scale);
}  // namespace lean

}  // namespace ferry
