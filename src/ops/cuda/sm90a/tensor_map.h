// The tensor maps the sm_90a kernels' TMA copies go through (tma.cuh): a (rows, heads, head_dim)
// tensor of bf16 (q, k, v, dout) or fp32 (the dq accumulator), seen in boxes of `box_rows` rows of
// one head and 128 bytes of columns (64 bf16 or 32 fp32), 128-byte swizzled as wgmma.cuh lays
// tiles out. Rows past `rows` read as zeros and are not written.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ferry::flash::sm90 {

enum class TensorMapElement { kBf16, kF32 };

// `base` 16-byte aligned and `row_elements` (from one row's head 0 to the next's) a multiple of
// 16 bytes: what the attention ops already require. Throws ferry::Error where the driver refuses.
CUtensorMap head_rows_tensor_map(const void* base, TensorMapElement element, int64_t rows, int heads,
                                 int head_dim, int64_t row_elements, int box_rows);

}  // namespace ferry::flash::sm90
