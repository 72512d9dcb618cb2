// The lean AdamW's block kernel (optim/lean_kernel.h), compiled once per instruction set from
// optim/lean_kernel_lanes.h: the AVX-512 and AVX2 kernels under GCC's target pragmas, the baseline
// as the build's flags say; block_kernel() picks one at run time by Highway's list of the targets
// the CPU has and the process allows.
//
// Compiled without FMA contraction, with -fno-math-errno and -fno-trapping-math (CMakeLists.txt;
// lean_kernel_lanes.h says why): every kernel gives the scalar reference's bits.

#include "optim/lean_kernel.h"

#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "optim/lean_random.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FERRY_NO_CLONES)
#define FERRY_LEAN_X86_KERNELS 1
#endif

namespace ferry::lean {

#define FERRY_LEAN_TARGET baseline
#include "optim/lean_kernel_lanes.h"
#undef FERRY_LEAN_TARGET

#ifdef FERRY_LEAN_X86_KERNELS
// The instruction sets of x86-64-v3 (haswell) and v4 as lists of extensions, not as arch=: GCC
// inlines the headers' functions (std::fma, lean_random.h) into a function of another target only
// when the two share their arch and tuning, and a call per lane would not vectorize.
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,lzcnt,movbe,f16c,popcnt")
#define FERRY_LEAN_TARGET avx2
#include "optim/lean_kernel_lanes.h"
#undef FERRY_LEAN_TARGET
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma,bmi,bmi2,lzcnt,movbe,f16c,popcnt")
#define FERRY_LEAN_TARGET avx512
#include "optim/lean_kernel_lanes.h"
#undef FERRY_LEAN_TARGET
#pragma GCC pop_options
#endif

BlockKernel block_kernel() {
#ifdef FERRY_LEAN_X86_KERNELS
  const int64_t targets = hwy::SupportedTargets();
  if ((targets & (HWY_AVX3 | HWY_AVX3_DL)) != 0) return avx512::update_block;
  if ((targets & HWY_AVX2) != 0) return avx2::update_block;
#endif
  return baseline::update_block;
}

RunKernel run_kernel() {
#ifdef FERRY_LEAN_X86_KERNELS
  const int64_t targets = hwy::SupportedTargets();
  if ((targets & (HWY_AVX3 | HWY_AVX3_DL)) != 0) return avx512::update_run;
  if ((targets & HWY_AVX2) != 0) return avx2::update_run;
#endif
  return baseline::update_run;
}

const char* block_kernel_target() {
#ifdef FERRY_LEAN_X86_KERNELS
  if (block_kernel() == avx512::update_block) return "AVX-512 (x86-64-v4)";
  if (block_kernel() == avx2::update_block) return "AVX2 (haswell)";
#endif
  return "baseline";
}

}  // namespace ferry::lean
