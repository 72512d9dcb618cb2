// FERRY_CUDA_CHECK(call): the one check of a CUDA runtime call (DESIGN.md §6.5). On failure it throws
// ferry::Error "[cuda] <call> failed on device <d>: <name> (<description>) at <file>:<line>".
// fmt-free, so .cu files can include it. For kernel launches: FERRY_CUDA_CHECK(cudaGetLastError()).
// Header-only: only code of a layer's cuda/ directory includes it (those link CUDA::cudart).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/check.h"

namespace ferry {

[[noreturn]] inline void cuda_call_failed(cudaError_t status, const char* call, const char* file, int line) {
  // Clears the error where it is not sticky (an out-of-memory), so the next check does not see it again.
  (void)cudaGetLastError();
  int device = -1;
  (void)cudaGetDevice(&device);
  raise("cuda", std::string(call) + " failed on device " + std::to_string(device) + ": " +
                    cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") at " + file + ":" +
                    std::to_string(line));
}

inline void cuda_check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) cuda_call_failed(status, call, file, line);
}

}  // namespace ferry

#define FERRY_CUDA_CHECK(call) ::ferry::cuda_check((call), #call, __FILE__, __LINE__)
