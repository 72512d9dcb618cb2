// Hopper's tensor memory accelerator (TMA) and the shared-memory barriers (mbarrier) that say when
// its copies have landed: the inline PTX the sm_90a kernels load their tiles with.
//
// One thread issues a tile's copy (cp.async.bulk.tensor) after announcing its byte count on the
// stage's barrier (arrive.expect_tx); the copy completes the barrier's phase as its bytes land,
// and every thread that reads the tile first waits for that phase (parity 0, 1, 0, ... for the
// stage's first, second, third use). With a tensor map of 128-byte swizzle and a box 64 bf16 wide,
// the copy writes exactly wgmma.cuh's swizzled layout; rows past the tensor's end are zero-filled.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ops/cuda/flash_attention_ptx.cuh"
#include "ops/cuda/sm90a/wgmma.cuh"

namespace ferry::flash::sm90 {

// A barrier whose phase completes once `arrivals` threads have arrived and the announced bytes
// have landed. The initialising thread's block must pass a __syncthreads before any other use.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#ifdef FERRY_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals)
               : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// This thread's arrival, announcing `bytes` that copies will complete on the barrier.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#ifdef FERRY_WGMMA
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
#endif
}

// An arrival on the barrier once this thread's cp.async copies issued so far have landed (counted
// in the barrier's arrivals: .noinc).
__device__ __forceinline__ void mbarrier_arrive_after_copies(uint64_t* bar) {
#ifdef FERRY_WGMMA
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
#endif
}

// Waits until the barrier's phase of this parity has completed; what it guarded is then visible.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef FERRY_WGMMA
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// The box at (column x, head y, row z) of a (rows, heads, columns) tensor into shared memory at
// `dst` (1024-byte aligned), completing its bytes on `bar`.
__device__ __forceinline__ void tma_load_box(void* dst, const CUtensorMap& map, int x, int y, int z,
                                             uint64_t* bar) {
#ifdef FERRY_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4}], "
      "[%5];\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(x), "r"(y), "r"(z), "r"(smem_address(bar))
      : "memory");
#endif
}

}  // namespace ferry::flash::sm90
