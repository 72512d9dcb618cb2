// Token embedding on the GPU: a gather of table rows, and its backward, a scatter-add.
//
// The backward is deterministic and needs no atomics: the (id, token) pairs are sorted by id with
// CUB's stable radix sort (so each id's tokens stay in token order), then one block per distinct
// id (and slice of columns) owns that table row: it starts from the row's current value and adds
// the tokens' gradient rows one after the other in fp32, in token order, and stores once. With an
// F32 table this is the CPU reference's order of additions, so the results are bit-identical; a
// BF16 table is rounded once per call.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;

// out (T,H) = table (V,H)[ids]; an id outside [0,V) writes a NaN row and flags the error.
template <int VEC>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ table,
                                         bf16* __restrict__ out, int64_t T, int64_t H, int64_t V,
                                         int* error_flag) {
  const int64_t chunks_per_row = H / VEC;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * chunks_per_row) return;
  const int64_t t = i / chunks_per_row, c = (i % chunks_per_row) * VEC;
  const int32_t id = ids[t];
  float v[VEC];
  if (id < 0 || id >= V) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = __int_as_float(0x7fc00000);
    if (c == 0) atomicOr(error_flag, cuda::kBadTokenId);
    cuda::store_bf16<VEC>(out + t * H + c, v);
    return;
  }
  using Raw = typename cuda::RawOf<VEC>::type;
  *reinterpret_cast<Raw*>(out + t * H + c) =
      *reinterpret_cast<const Raw*>(table + static_cast<int64_t>(id) * H + c);
}

// Sort input: keys = id (V for an invalid id, which sorts last and is skipped), values = token.
__global__ void embedding_keys_kernel(const int32_t* __restrict__ ids, int64_t T, int64_t V,
                                      unsigned int* __restrict__ keys, unsigned int* __restrict__ tokens,
                                      int* error_flag) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < V;
  if (!ok) atomicOr(error_flag, cuda::kBadTokenId);
  keys[t] = ok ? static_cast<unsigned int>(id) : static_cast<unsigned int>(V);
  tokens[t] = static_cast<unsigned int>(t);
}

template <typename Out>
__device__ __forceinline__ float load_out(const Out* p) {
  return cuda::to_float(*p);
}

// One block per sorted position i that starts a run of equal ids (others exit at once), and per
// slice of VEC * blockDim columns (blockIdx.y): dtable[id] = dtable[id] + dout[t0] + dout[t1] + ...
// in fp32, tokens in order.
template <int VEC, typename Out>
__global__ void embedding_backward_kernel(const unsigned int* __restrict__ keys,
                                          const unsigned int* __restrict__ tokens,
                                          const bf16* __restrict__ dout, Out* __restrict__ dtable, int64_t T,
                                          int64_t H, int64_t V) {
  const int64_t i = blockIdx.x;
  const unsigned int id = keys[i];
  if (id >= V || (i > 0 && keys[i - 1] == id)) return;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (c >= H) return;
  Out* row = dtable + static_cast<int64_t>(id) * H + c;
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = load_out(row + j);
  for (int64_t r = i; r < T && keys[r] == id; ++r) {
    float g[VEC];
    cuda::load_bf16<VEC>(dout + static_cast<int64_t>(tokens[r]) * H + c, g);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] += g[j];
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) row[j] = cuda::from_float<Out>(acc[j]);
}

}  // namespace

void CudaOps::embedding_forward(const int32_t* ids, Tensor table, Tensor out) {
  const char* op = "embedding_forward";
  cuda::expect_dtype(op, "table", table, DType::BF16);
  CUDA_OPS_EXPECT(table.ndim == 2, op, cuda::describe("table", table) + ": expected (V, H)");
  const int64_t V = table.shape[0], H = table.shape[1];
  const int64_t T = cuda::expect_matrix(op, "out", out, H, DType::BF16);
  if (T == 0 || H == 0) return;
  CUDA_OPS_EXPECT(ids != nullptr, op, "ids is null");
  const auto* src = static_cast<const bf16*>(table.data);
  auto* dst = static_cast<bf16*>(out.data);
  constexpr int kThreads = 256;
  if (H % 8 == 0 && cuda::aligned16(src) && cuda::aligned16(dst)) {
    embedding_forward_kernel<8><<<cuda::blocks_for(T * H / 8, kThreads), kThreads, 0, state_->stream>>>(
        ids, src, dst, T, H, V, state_->error_flag_ptr());
  } else {
    embedding_forward_kernel<1><<<cuda::blocks_for(T * H, kThreads), kThreads, 0, state_->stream>>>(
        ids, src, dst, T, H, V, state_->error_flag_ptr());
  }
  CHECK_CUDA_LAUNCH();
}

void CudaOps::embedding_backward(const int32_t* ids, Tensor dout, Tensor dtable) {
  const char* op = "embedding_backward";
  cuda::expect_grad_dtype(op, "dtable", dtable);
  CUDA_OPS_EXPECT(dtable.ndim == 2, op, cuda::describe("dtable", dtable) + ": expected (V, H)");
  const int64_t V = dtable.shape[0], H = dtable.shape[1];
  const int64_t T = cuda::expect_matrix(op, "dout", dout, H, DType::BF16);
  if (T == 0 || H == 0) return;
  CUDA_OPS_EXPECT(ids != nullptr, op, "ids is null");
  CUDA_OPS_EXPECT(T < (int64_t{1} << 31) && V < (int64_t{1} << 31), op, "T and V must be below 2^31");
  cudaStream_t stream = state_->stream;
  const int n = static_cast<int>(T);

  // Keys and values, double-buffered for the sort: [0, T) in, [T, 2T) out.
  auto* keys = static_cast<unsigned int*>(state_->buffer(
      cuda::Scratch::kSortKeys, 2 * T * sizeof(unsigned int), "the embedding backward's sort keys"));
  auto* vals = static_cast<unsigned int*>(state_->buffer(
      cuda::Scratch::kSortVals, 2 * T * sizeof(unsigned int), "the embedding backward's sort values"));
  embedding_keys_kernel<<<cuda::blocks_for(T, 256), 256, 0, stream>>>(ids, T, V, keys, vals,
                                                                      state_->error_flag_ptr());
  CHECK_CUDA_LAUNCH();

  int end_bit = 1;  // bits that hold every key in [0, V]
  while (end_bit < 32 && (int64_t{1} << end_bit) <= V) ++end_bit;
  size_t temp_bytes = 0;
  FERRY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys + T, vals, vals + T, n, 0,
                                                   end_bit, stream));
  void* temp = state_->buffer(cuda::Scratch::kSortTemp, temp_bytes, "the embedding backward's sort");
  FERRY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys + T, vals, vals + T, n, 0,
                                                   end_bit, stream));

  const unsigned int* sorted_keys = keys + T;
  const unsigned int* sorted_tokens = vals + T;
  const auto* g = static_cast<const bf16*>(dout.data);
  constexpr int kThreads = 128;
  const bool vec = H % 8 == 0 && cuda::aligned16(g) && cuda::aligned16(dtable.data);
  const int per_block = kThreads * (vec ? 8 : 1);
  const dim3 grid(static_cast<unsigned int>(T), static_cast<unsigned int>((H + per_block - 1) / per_block));
  if (dtable.dtype == DType::F32) {
    auto* d = static_cast<float*>(dtable.data);
    if (vec)
      embedding_backward_kernel<8><<<grid, kThreads, 0, stream>>>(sorted_keys, sorted_tokens, g, d, T, H, V);
    else
      embedding_backward_kernel<1><<<grid, kThreads, 0, stream>>>(sorted_keys, sorted_tokens, g, d, T, H, V);
  } else {
    auto* d = static_cast<bf16*>(dtable.data);
    if (vec)
      embedding_backward_kernel<8><<<grid, kThreads, 0, stream>>>(sorted_keys, sorted_tokens, g, d, T, H, V);
    else
      embedding_backward_kernel<1><<<grid, kThreads, 0, stream>>>(sorted_keys, sorted_tokens, g, d, T, H, V);
  }
  CHECK_CUDA_LAUNCH();
}

}  // namespace ferry
