#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/check.h"
#include "core/cuda_check.h"
#include "ops/cuda/sm90a/tensor_map.h"

namespace ferry::flash::sm90 {
namespace {

// The driver's encoder, found once through the runtime (ferry links the runtime, not libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FERRY_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      raise(
          "cuda",
          "the driver has no cuTensorMapEncodeTiled (a CUDA 12 driver or newer is needed for sm_90 kernels)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

CUtensorMap head_rows_tensor_map(const void* base, int64_t rows, int heads, int head_dim,
                                 int64_t row_elements, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  // Byte strides of dimensions 1 and 2 (dimension 0 is contiguous).
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_dim) * 2,
                                 static_cast<cuuint64_t>(row_elements) * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult status =
      encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    raise("cuda", "cuTensorMapEncodeTiled refused a (" + std::to_string(rows) + ", " + std::to_string(heads) +
                      ", " + std::to_string(head_dim) + ") bf16 tensor with rows " +
                      std::to_string(row_elements) + " elements apart (error " +
                      std::to_string(static_cast<int>(status)) + ")");
  return map;
}

}  // namespace ferry::flash::sm90
