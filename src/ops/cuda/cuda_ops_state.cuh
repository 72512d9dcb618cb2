// CudaOps' CUDA-side members, shared by the .cu files of src/ops/cuda.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_gemm.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cudnn_attention.h"

namespace ferry {

namespace cuda {

// Bits of the device-side error flag (see CudaOps::device_error).
enum DeviceErrorBits : int {
  kBadTokenId = 1,  // embedding: an id outside [0, V)
  kBadTarget = 2,   // cross-entropy: a target outside [0, V) that is not -100
};

// Named scratch buffers: each is used by one op at a time, on the ops' stream.
enum class Scratch : int {
  kLogits,      // FLCE: (chunk, Vp) bf16 logits, then dlogits in place
  kRowLoss,     // FLCE: (T) fp32 per-token losses
  kPartials,    // column reductions: (splits, cols) fp32
  kSortKeys,    // embedding backward: 2 x T keys
  kSortVals,    // embedding backward: 2 x T values
  kSortTemp,    // embedding backward: CUB's temporary storage
  kAttention,   // attention, forward and backward: flash attention's or cuDNN's workspace
  kWeightGrad,  // linear backward: (out, in) bf16 sum of a bf16 gradient and its product, copied back
  kCount
};

}  // namespace cuda

struct CudaOps::State {
  cudaStream_t stream = nullptr;
  WorkspaceAllocator allocator;  // before gemm and scratch: they keep a pointer to it
  int sm_count = 1;
  cuda::Gemm gemm;
  cuda::StreamBuffer scratch[static_cast<int>(cuda::Scratch::kCount)];
  cuda::DeviceMemory error_flag;                     // one int, bits of DeviceErrorBits
  std::unique_ptr<CudnnAttention> cudnn_attention;   // null: cuDNN off or not installed
  bool cudnn_forward = true, cudnn_backward = true;  // Ops::use_library_attention

  State(cudaStream_t s, size_t gemm_workspace_bytes, WorkspaceAllocator workspace_allocator,
        int gemm_candidates);

  void* buffer(cuda::Scratch slot, size_t bytes, const char* what) {
    return scratch[static_cast<int>(slot)].get(bytes, stream, what);
  }
  int* error_flag_ptr() const { return static_cast<int*>(error_flag.get()); }
};

}  // namespace ferry
