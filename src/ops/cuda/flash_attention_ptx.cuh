// The only inline PTX of flash attention: the tensor-core product, the shared-memory fragment
// loads that feed it, and the asynchronous global -> shared copies. All need sm_80 or newer; a
// build for an older target compiles these to a trap (the host refuses such a device first), so
// a HIP port replaces this one file.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// lane = 4 g + t (g = lane / 4 in 0..7, t = lane % 4). Each 32-bit register holds two bf16, the
// lower column (or k) in the low half.
//   A (16 x 16, row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//                           a[3] = A[g+8][2t+8..]
//   B (16 x 8, k x n):      b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C (16 x 8, fp32):       c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
// ldmatrix.x4 loads four 8x8 bf16 matrices whose row addresses come from lanes 8i..8i+7 for
// matrix i; register i of lane 4g+t then holds row g, columns 2t..2t+1 of matrix i (with .trans:
// rows 2t..2t+1 of column g, i.e. the transposed matrix).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ferry::flash {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FERRY_FLASH_NO_MMA 1
#endif

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// d += a * b for one 16x8x16 tile, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// Four 8x8 bf16 matrices from shared memory; `row` is this lane's row address (16-byte aligned).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row))
               : "memory");
#else
  __trap();
#endif
}

// 16 bytes global -> shared, asynchronous; when !valid the 16 bytes are zero-filled and `src` is
// not read (it must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  __trap();
#endif
}

// 4 bytes global -> shared, asynchronous, zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 4 : 0)
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until this thread's copies are all done (a __syncthreads must follow before other
// threads read them).
__device__ __forceinline__ void cp_async_wait_all() {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// 2^x, the hardware's approximation (relative error about 2^-22) with results below 2^-126
// flushed to 0: what exp2f compiles to, without the instructions that keep such results.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Waits until at most N of this thread's committed groups of copies are still running.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
#ifndef FERRY_FLASH_NO_MMA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Two floats -> one register of two bf16 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace ferry::flash
