#include "ops/cuda/cuda_ops_state.cuh"
#include "ops/cuda/ragged_attention_tables.h"

namespace ferry {

namespace {

__global__ void ragged_tables_kernel(const int32_t* __restrict__ bounds, int64_t segments, int64_t batch,
                                     int64_t q_row, int64_t kv_row, int64_t o_row, int32_t* seq_len,
                                     int64_t* q_offset, int64_t* kv_offset, int64_t* o_offset) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i > batch) return;
  const int64_t end = bounds[segments];
  const int64_t first = i < segments ? bounds[i] : end;
  q_offset[i] = first * q_row;
  kv_offset[i] = first * kv_row;
  o_offset[i] = first * o_row;
  if (i < batch) seq_len[i] = i < segments ? bounds[i + 1] - bounds[i] : 0;
}

// blockIdx.z: the segment, blockIdx.y: the head, x: positions within the segment.
__global__ void ragged_statistics_kernel(const int32_t* __restrict__ bounds, int64_t tokens, int64_t seq,
                                         float* lse, float* packed, bool to_packed) {
  const int64_t i = blockIdx.z, h = blockIdx.y, heads = gridDim.y;
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = bounds[i];
  if (s >= bounds[i + 1] - first) return;
  float* ferry_value = lse + h * tokens + first + s;
  float* cudnn_value = packed + (i * heads + h) * seq + s;
  if (to_packed)
    *cudnn_value = *ferry_value;
  else
    *ferry_value = *cudnn_value;
}

}  // namespace

void fill_ragged_attention_tables(const int32_t* bounds, int64_t segments, int64_t batch, int64_t q_row,
                                  int64_t kv_row, int64_t o_row, int32_t* seq_len, int64_t* q_offset,
                                  int64_t* kv_offset, int64_t* o_offset, void* stream) {
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((batch + 1 + threads - 1) / threads);
  ragged_tables_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      bounds, segments, batch, q_row, kv_row, o_row, seq_len, q_offset, kv_offset, o_offset);
  CHECK_CUDA_LAUNCH();
}

void copy_ragged_statistics(const int32_t* bounds, int64_t segments, int heads, int64_t tokens, int64_t seq,
                            float* lse, float* packed, bool to_packed, void* stream) {
  if (segments == 0) return;
  const int threads = 256;
  const dim3 grid(static_cast<unsigned>((seq + threads - 1) / threads), static_cast<unsigned>(heads),
                  static_cast<unsigned>(segments));
  ragged_statistics_kernel<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(bounds, tokens, seq, lse,
                                                                                    packed, to_packed);
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
