// The tensor maps the sm_90a kernels' TMA copies go through (tma.cuh): a bf16 (rows, heads,
// head_dim) tensor such as q, k, v or dout, seen in boxes of `box_rows` rows of one head and 64
// columns (128 bytes), 128-byte swizzled as wgmma.cuh lays tiles out. Rows past `rows` read as
// zeros.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ferry::flash::sm90 {

// `base` 16-byte aligned and `row_elements` (from one row's head 0 to the next's) a multiple of
// 8 (16 bytes): what the attention ops already require. Throws ferry::Error where the driver refuses.
CUtensorMap head_rows_tensor_map(const void* base, int64_t rows, int heads, int head_dim,
                                 int64_t row_elements, int box_rows);

}  // namespace ferry::flash::sm90
