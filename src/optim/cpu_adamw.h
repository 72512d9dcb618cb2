// The fast CPU AdamW of DESIGN.md §2: one fused SIMD pass over a unit, at the DRAM roofline.
//
// Per element it reads the gradient (bf16 or fp32) and the fp32 master, m and v once, and writes the
// master, m, v and (optionally) the bf16 copy of the new weight, rounded to nearest even as
// f32_to_bf16, into a separate buffer (the pinned staging buffer that the next h2d reads).
// 26 bytes move per parameter with bf16 gradients and the bf16 copy (read 2 + 3*4, write 3*4 + 2);
// on AVX2/AVX-512 the bf16 copy is written with streaming stores, so its lines are not read first.
//
// Exactness: the result is bit-identical to adamw_step (optim/adamw.h) on the same inputs -- the same
// fp32 operations in the same order, fused multiply-adds exactly where the reference has std::fma
// (hn::MulAdd on FMA targets; on targets without FMA hardware, SSSE3/SSE4 and the portable EMU128,
// those two per element are std::fma lane by lane: slower, same bits), and IEEE division and
// square root. bf16 gradients are widened exactly. Checked on every SIMD target this CPU runs
// (tests/optim_cpu_adamw_test.cpp).
//
// Highway (1.0.3) compiles the kernel for SSSE3, SSE4, AVX2, AVX-512 (and NEON/SVE on Arm) in one
// binary and picks the best one the CPU supports at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "optim/adamw.h"

namespace ferry {

// One parameter of a unit: elements [offset, offset + count) of the unit's flat buffers, updated
// with or without weight decay (torch's param groups; norms and biases usually go without).
struct AdamWSegment {
  size_t offset = 0;
  size_t count = 0;
  bool decay = true;
};

// The buffers of one unit, all indexed by the same element offsets. They must not overlap, with one
// exception: bf16 gradients may sit in `bf16_out` itself (grad == bf16_out, grad_dtype BF16). The
// sliding engine lets a unit's gradient land in the pinned buffer that later carries its new
// weights; each element's gradient is read before its new weight is written over it (per vector,
// and every thread owns its own slice), so the update reads the gradient the device sent.
struct AdamWUnitBuffers {
  float* master = nullptr;        // fp32 master weights, updated in place
  float* m = nullptr;             // exp_avg, updated in place
  float* v = nullptr;             // exp_avg_sq, updated in place
  const void* grad = nullptr;     // read only (unless it is bf16_out)
  DType grad_dtype = DType::F32;  // F32 or BF16
  uint16_t* bf16_out = nullptr;   // optional: receives bf16(new master); may be `grad` (see above)
};

// What every AdamW over a unit's segments (cpu_adamw_step, DeviceAdamW::step) asks of its
// arguments, asserted: t >= 1, an F32 or BF16 gradient, segments sorted by offset and disjoint,
// and, when they name any element, the four buffers set and only a bf16 gradient in `bf16_out`.
// Returns how many elements the segments name (0: nothing to do, the buffers are not looked at).
size_t check_adamw_unit(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments, int64_t step);

// One AdamW step (t = `step`, 1-based, as in adamw_step) over the elements the segments name;
// elements outside every segment are not touched. Segments are sorted by offset and disjoint.
// `grad_scale` multiplies the gradient first (the clipping coefficient). Work is split statically
// over `pool` in slices aligned to 64 elements; a small unit runs on the calling thread.
void cpu_adamw_step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments,
                    const AdamWHyper& hyper, int64_t step, float grad_scale,
                    ThreadPool& pool = ThreadPool::global());

// AdamW over whole rows of a unit laid out as rows of `row_len` elements (an embedding table), one
// weight-decay setting for all: row rows[k] of master, m, v (and bf16_out) takes its gradient from
// row k of `unit.grad` (the rows' gradients gathered, in the order of `rows`), or, with unit.grad
// null, a gradient of zero. Per element the same operations as cpu_adamw_step, so a row updated
// here holds the bits the whole unit's pass would give it (for a zero gradient: 0 x grad_scale = 0
// for any finite grad_scale). Rows are distinct; the gradient must not overlap bf16_out. Threads
// take blocks of rows.
void cpu_adamw_rows(const AdamWUnitBuffers& unit, size_t row_len, std::span<const int32_t> rows, bool decay,
                    const AdamWHyper& hyper, int64_t step, float grad_scale,
                    ThreadPool& pool = ThreadPool::global());

// The SIMD target the dispatcher runs on this CPU: "AVX3", "AVX2", "SSE4", "NEON", "EMU128", ...
const char* cpu_adamw_target();

}  // namespace ferry
