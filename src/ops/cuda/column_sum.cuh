// Deterministic sums over the rows of a (rows, cols) matrix, for the parameter gradients that are
// column sums: linear's dbias (sum of dy) and rmsnorm's dweight (sum of dout * x * rstd).
//
// Two kernels, no atomics, a fixed order for a given shape:
//   1. column_partials: the rows are cut into `splits` contiguous ranges; block (x, y) sums the
//      VEC-wide column chunks 32*x .. 32*x+31 over row range y, 8 rows in flight (threadIdx.y),
//      and the 8 partial sums are combined in order through shared memory: partials (splits, cols).
//   2. reduce_partials: out[c] = out[c] + sum over splits in order of partials[s][c], in fp32, with
//      one rounding to out's dtype (F32 or BF16).
//
// The value summed is supplied by a Loader: `__device__ void load(int64_t row, int64_t col,
// float (&v)[VEC]) const` gives the VEC values of columns col..col+VEC-1 of that row.
#pragma once

#include "ops/cuda/cuda_common.cuh"

namespace ferry::cuda {

constexpr int kColumnTileX = 32;  // column chunks per block
constexpr int kColumnTileY = 8;   // rows in flight per block

template <int VEC, typename Loader>
__global__ void __launch_bounds__(kColumnTileX* kColumnTileY)
    column_partials_kernel(Loader loader, int64_t rows, int64_t cols, int64_t rows_per_split,
                           float* partials) {
  __shared__ float tile[kColumnTileY][kColumnTileX * VEC];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * kColumnTileX + tx) * VEC;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
  if (col < cols) {
    for (int64_t r = r0 + ty; r < r1; r += kColumnTileY) {
      float v[VEC];
      loader.load(r, col, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) tile[ty][tx * VEC + j] = acc[j];
  __syncthreads();
  // Thread (tx, ty) finishes the columns tx*VEC + ty, + kColumnTileY, ...: each sums the 8 rows
  // of the tile in order.
  for (int k = ty; k < VEC; k += kColumnTileY) {
    const int64_t c = col + k;
    if (c >= cols) continue;
    float s = 0.0f;
#pragma unroll
    for (int y = 0; y < kColumnTileY; ++y) s += tile[y][tx * VEC + k];
    partials[static_cast<int64_t>(blockIdx.y) * cols + c] = s;
  }
}

template <typename Out>
__global__ void reduce_partials_kernel(const float* __restrict__ partials, int splits, int64_t cols,
                                       Out* __restrict__ out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int k = 0; k < splits; ++k) s += partials[static_cast<int64_t>(k) * cols + c];
  out[c] = from_float<Out>(to_float(out[c]) + s);
}

// `wanted` row ranges of `rows` rows, as many as make sense: each range at least 32 rows, at most
// 1024 ranges (the partials' scratch holds 1024 rows of cols), at least one.
inline int clamp_row_splits(int64_t wanted, int64_t rows) {
  const int64_t max_by_rows = (rows + 31) / 32;
  if (wanted > max_by_rows) wanted = max_by_rows;
  if (wanted > 1024) wanted = 1024;
  return static_cast<int>(wanted < 1 ? 1 : wanted);
}

// How many row ranges: enough blocks to fill the GPU (4 per SM), clamped as above.
inline int column_splits(int64_t rows, int64_t cols, int vec, int sm_count) {
  const int64_t col_blocks = (cols / vec + kColumnTileX - 1) / kColumnTileX;
  return clamp_row_splits(
      (4 * static_cast<int64_t>(sm_count) + col_blocks - 1) / (col_blocks < 1 ? 1 : col_blocks), rows);
}

// out (cols, F32 or BF16) += the sum over `splits` rows of partials (splits, cols), in order.
inline void reduce_column_partials(const float* partials, int splits, int64_t cols, void* out,
                                   DType out_dtype, cudaStream_t stream) {
  const unsigned int blocks = blocks_for(cols, 256);
  if (out_dtype == DType::F32)
    reduce_partials_kernel<float>
        <<<blocks, 256, 0, stream>>>(partials, splits, cols, static_cast<float*>(out));
  else
    reduce_partials_kernel<__nv_bfloat16>
        <<<blocks, 256, 0, stream>>>(partials, splits, cols, static_cast<__nv_bfloat16*>(out));
  CHECK_CUDA_LAUNCH();
}

// out (cols) += column sums of the values `loader` gives over `rows` rows. `partials` holds at
// least splits * cols floats (column_splits). VEC must divide cols.
template <int VEC, typename Loader>
void column_sum(const Loader& loader, int64_t rows, int64_t cols, float* partials, int splits, void* out,
                DType out_dtype, cudaStream_t stream) {
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  const dim3 block(kColumnTileX, kColumnTileY);
  const dim3 grid(static_cast<unsigned int>((cols / VEC + kColumnTileX - 1) / kColumnTileX),
                  static_cast<unsigned int>(splits));
  column_partials_kernel<VEC, Loader>
      <<<grid, block, 0, stream>>>(loader, rows, cols, rows_per_split, partials);
  CHECK_CUDA_LAUNCH();
  reduce_column_partials(partials, splits, cols, out, out_dtype, stream);
}

}  // namespace ferry::cuda
