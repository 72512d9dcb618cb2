// The lean AdamW's per-block work (optim/lean_adamw.h): decode one block of kStateBlock elements,
// the reference's fp32 AdamW on each, encode. Written as loops over the block's lanes with integer
// masks for every choice, which GCC vectorizes (AVX-512, AVX2 kernels) into the same IEEE operations
// the scalar encoders of lean_adamw.h perform one element at a time: the results are bit-identical
// to them (tests/optim_lean_adamw_test.cpp runs the scalar reference beside it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "optim/adamw_scalars.h"
#include "optim/lean_adamw.h"

namespace ferry::lean {

// What one step passes to every block.
struct StepConstants {
  StepConstants(const AdamWScalars& scalars, float scale, uint64_t random_key)
      : sc(scalars), grad_scale(scale), key(random_key), inverse_bc2_sqrt(1.0f / scalars.bc2_sqrt) {}
  AdamWScalars sc;
  float grad_scale = 1.0f;
  uint64_t key = 0;  // random_key(unit seed, step)
  // sqrt(v) / bc2_sqrt is computed as sqrt(v) * (1 / bc2_sqrt): within an ulp of the quotient, far
  // below v's 8-bit code, and a multiply where the division took as long as the rest of the
  // update's arithmetic.
  float inverse_bc2_sqrt = 1.0f;
};

// One block's per-element inputs; lanes past the block's count are zero.
struct alignas(64) BlockInput {
  float grad[kStateBlock];       // fp32, before grad_scale
  uint32_t decay[kStateBlock];   // all ones where weight decay applies, else 0
  uint32_t active[kStateBlock];  // all ones where a segment names the element (others keep their value)
  // A whole block (kStateBlock elements) that one segment names: every lane active, weight decay
  // as `decay_all`, and the two masks above are not read (most blocks; the kernel then has no
  // per-lane choices to make).
  bool uniform = false;
  bool decay_all = false;
};

// Block [b, b + count) of the unit (b a multiple of kStateBlock, count <= kStateBlock); bf16(new
// master) into bf16_out[i] for the active elements when bf16_out is not null.
using BlockKernel = void (*)(const LeanUnitState& s, size_t b, size_t count, const BlockInput& in,
                             const StepConstants& c, uint16_t* bf16_out, LeanStepStats& stats);

// Whole blocks [b, b + blocks * kStateBlock) that one segment names: every lane updated, with weight
// decay as `decay`, gradient elements [grad_first, grad_first + blocks * kStateBlock) of `grad`
// (bf16 when grad_bf16, else fp32; null: zeros), each block's read before its bf16 copy is written
// (`grad` may be bf16_out). The same bits as the block kernel over those blocks.
using RunKernel = void (*)(const LeanUnitState& s, size_t b, size_t blocks, const void* grad,
                           size_t grad_first, bool grad_bf16, bool decay, const StepConstants& c,
                           uint16_t* bf16_out, LeanStepStats& stats);

// The block kernel compiled for the best instruction set that the CPU has and Highway's target
// mask allows (hwy::SupportedTargets: AVX-512, AVX2, or the baseline), read at every call: with
// AVX3 masked (hwy::SetSupportedTargetsForTest) an AVX-512 machine runs the AVX2 kernel, for the
// lean AdamW as for cpu_adamw. Every kernel gives the same bits.
BlockKernel block_kernel();
RunKernel run_kernel();  // the same instruction set's
// Its instruction set, for benches and logs.
const char* block_kernel_target();

}  // namespace ferry::lean
