// RMSNorm over the last dim on the GPU, as the CPU reference computes it but with fp32 statistics:
//   rstd = 1 / sqrt(mean(x^2) + eps);  out = (x * rstd) * weight.
//
// One group of G lanes of a warp per row, G = the power of two (<= 32) nearest above D / VEC, so a
// q/k-norm row of D = 8..128 takes 1..16 lanes and a hidden row (D = 4096) a whole warp; each lane
// walks its VEC-wide chunks (16-byte loads when D % 8 == 0), the group sums with shuffles. Where a
// lane's 16-byte chunks number 16 or fewer (D % 8 == 0, D <= 4096), the forward holds them in
// registers (rmsnorm_forward_held_kernel): all its loads in flight at once, x read once, the same
// sums in the same order. Otherwise the row is read twice (statistics, then output; the second
// read hits L1/L2).
// dweight is a column sum (column_sum.cuh): fp32 partials per block of rows, then one reduction.
// A backward that wants both dx and dweight of a wide row (D = 8 x a multiple of 32, up to 4096:
// the hidden norms) runs them in one pass instead (rows_backward_kernel below), which reads x and
// dout from memory once rather than twice.
#include <type_traits>

#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// What both forward kernels do with a row: sum its values' squares, lane by lane in chunk order;
// turn the group's sums into the row's rstd (every lane of the group, valid row or not, takes part
// in the shuffles); write a chunk of the output, (x * rstd) * weight.
template <int VEC>
__device__ __forceinline__ void add_squares(const float (&v)[VEC], float& ss) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) ss += v[j] * v[j];
}
template <int G>
__device__ __forceinline__ float row_rstd(float ss, int D, float eps) {
  ss = cuda::group_sum<G>(ss);
  return 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
}
template <int VEC>
__device__ __forceinline__ void write_normed(bf16* yr, const bf16* w, int c, float (&v)[VEC], float s) {
  float wv[VEC];
  cuda::load_bf16<VEC>(w + c * VEC, wv);
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = (v[j] * s) * wv[j];
  cuda::store_bf16<VEC>(yr + c * VEC, v);
}

template <int G, int VEC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, float eps,
                           bf16* __restrict__ out, float* __restrict__ rstd, int64_t R, int D) {
  const int lane = threadIdx.x % G;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / G;
  const bool valid = row < R;  // all lanes stay for the shuffles
  const int chunks = D / VEC;
  const bf16* xr = x + (valid ? row : 0) * D;
  float ss = 0.0f;
  if (valid) {
    for (int c = lane; c < chunks; c += G) {
      float v[VEC];
      cuda::load_bf16<VEC>(xr + c * VEC, v);
      add_squares(v, ss);
    }
  }
  const float s = row_rstd<G>(ss, D, eps);
  if (!valid) return;
  if (lane == 0) rstd[row] = s;
  bf16* yr = out + row * D;
  for (int c = lane; c < chunks; c += G) {
    float v[VEC];
    cuda::load_bf16<VEC>(xr + c * VEC, v);
    write_normed(yr, w, c, v, s);
  }
}

// rmsnorm_forward_kernel<G, 8> with each lane's chunks (at most PER) held in registers from one
// load to the output: every load is issued before the first is used, and x is read once. The
// squares are summed in the order the two-pass kernel sums them, and the output is the same
// expression of the same values.
template <int G, int PER>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_held_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, float eps,
                                bf16* __restrict__ out, float* __restrict__ rstd, int64_t R, int D) {
  constexpr int VEC = 8;
  const int lane = threadIdx.x % G;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / G;
  const bool valid = row < R;  // all lanes stay for the shuffles
  const int chunks = D / VEC;
  const bf16* xr = x + (valid ? row : 0) * D;
  uint4 raw[PER];
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int c = lane + k * G;
    raw[k] = valid && c < chunks ? *reinterpret_cast<const uint4*>(xr + c * VEC) : make_uint4(0, 0, 0, 0);
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    if (!valid || lane + k * G >= chunks) continue;
    float v[VEC];
    cuda::unpack_bf16<VEC>(raw[k], v);
    add_squares(v, ss);
  }
  const float s = row_rstd<G>(ss, D, eps);
  if (!valid) return;
  if (lane == 0) rstd[row] = s;
  bf16* yr = out + row * D;
#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int c = lane + k * G;
    if (c >= chunks) continue;
    float v[VEC];
    cuda::unpack_bf16<VEC>(raw[k], v);
    write_normed(yr, w, c, v, s);
  }
}

// dx = dres + (s * (w * g) - x * c) with c = mean(x * w * g) * s^3 (the CPU reference's formula),
// in fp32 and rounded once. dres is optional and may be dx: each element is read before it is
// written, by the same thread (hence neither is __restrict__).
template <int G, int VEC>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                            const float* __restrict__ rstd, const bf16* __restrict__ dout, const bf16* dres,
                            bf16* dx, int64_t R, int D) {
  const int lane = threadIdx.x % G;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / G;
  const bool valid = row < R;
  const int chunks = D / VEC;
  const bf16* xr = x + (valid ? row : 0) * D;
  const bf16* gr = dout + (valid ? row : 0) * D;
  float dot = 0.0f;
  if (valid) {
    for (int c = lane; c < chunks; c += G) {
      float xv[VEC], wv[VEC], gv[VEC];
      cuda::load_bf16<VEC>(xr + c * VEC, xv);
      cuda::load_bf16<VEC>(w + c * VEC, wv);
      cuda::load_bf16<VEC>(gr + c * VEC, gv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) dot += xv[j] * wv[j] * gv[j];
    }
  }
  dot = cuda::group_sum<G>(dot);
  if (!valid) return;
  const float s = rstd[row];
  const float k = dot / static_cast<float>(D) * s * s * s;
  bf16* dr = dx + row * D;
  const bf16* rr = dres != nullptr ? dres + row * D : nullptr;
  for (int c = lane; c < chunks; c += G) {
    float xv[VEC], wv[VEC], gv[VEC];
    cuda::load_bf16<VEC>(xr + c * VEC, xv);
    cuda::load_bf16<VEC>(w + c * VEC, wv);
    cuda::load_bf16<VEC>(gr + c * VEC, gv);
#pragma unroll
    for (int j = 0; j < VEC; ++j) xv[j] = s * (wv[j] * gv[j]) - xv[j] * k;
    if (rr != nullptr) {
      float rv[VEC];
      cuda::load_bf16<VEC>(rr + c * VEC, rv);
#pragma unroll
      for (int j = 0; j < VEC; ++j) xv[j] = rv[j] + xv[j];
    }
    cuda::store_bf16<VEC>(dr + c * VEC, xv);
  }
}

// dx and dweight's partial sums in one pass. Each block takes a contiguous range of rows and
// thread c the 8 columns 8c..8c+7 of each of them (D / 8 threads, whole warps), kRows rows at a
// time: the row's dot product is summed over the block (each warp's lanes, then the warps in
// order), so every thread holds its columns of x and dout in registers from load to dx and adds
// dout * (x * rstd) to its columns' fp32 sums, which it writes as the block's partials at the end.
// Fixed order for a given shape and grid, as column_sum's. With kResidual, dres (which may be dx)
// is loaded for the whole batch before the barrier, beside the dot products' sums: each element is
// still read before the same thread writes it, and its load no longer waits for the store of the
// row before (which it might alias) after the barrier.
constexpr int kRowsAtOnce = 4;
constexpr int kMaxRowThreads = 512;  // D <= 4096

// Columns col..col+7 of row `row` of a D-wide bf16 matrix, raw, or zeros for a row at or past r1
// (the block's end), so that a batch's last rows need no branch of their own.
__device__ __forceinline__ uint4 load_row_piece(const bf16* m, int64_t row, int64_t r1, int D, int64_t col) {
  return row < r1 ? *reinterpret_cast<const uint4*>(m + row * D + col) : make_uint4(0, 0, 0, 0);
}

template <bool kResidual>
__global__ void __launch_bounds__(kMaxRowThreads)
    rows_backward_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                         const float* __restrict__ rstd, const bf16* __restrict__ dout, const bf16* dres,
                         bf16* dx, float* __restrict__ partials, int64_t R, int64_t rows_per_block, int D) {
  __shared__ float warp_dots[2][kMaxRowThreads / 32][kRowsAtOnce];
  const int c = threadIdx.x, warp = c / 32, lane = c % 32, warps = blockDim.x / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t r1 = r0 + rows_per_block < R ? r0 + rows_per_block : R;
  const int64_t col = static_cast<int64_t>(c) * 8;
  float wv[8], dw[8];
  cuda::load_bf16<8>(w + col, wv);
#pragma unroll
  for (int j = 0; j < 8; ++j) dw[j] = 0.0f;
  int parity = 0;
  for (int64_t r = r0; r < r1; r += kRowsAtOnce, parity ^= 1) {
    uint4 xr[kRowsAtOnce], gr[kRowsAtOnce];
    float dot[kRowsAtOnce];
#pragma unroll
    for (int i = 0; i < kRowsAtOnce; ++i) {
      xr[i] = load_row_piece(x, r + i, r1, D, col);
      gr[i] = load_row_piece(dout, r + i, r1, D, col);
    }
#pragma unroll
    for (int i = 0; i < kRowsAtOnce; ++i) {
      float xv[8], gv[8];
      cuda::unpack_bf16<8>(xr[i], xv);
      cuda::unpack_bf16<8>(gr[i], gv);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) s += xv[j] * wv[j] * gv[j];
      dot[i] = cuda::group_sum<32>(s);
    }
    uint4 rr[kResidual ? kRowsAtOnce : 1];
    if constexpr (kResidual) {
#pragma unroll
      for (int i = 0; i < kRowsAtOnce; ++i) rr[i] = load_row_piece(dres, r + i, r1, D, col);
    }
    // Two sets of slots, alternating: a batch's writes cannot meet the previous batch's reads,
    // which the one barrier between them orders.
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kRowsAtOnce; ++i) warp_dots[parity][warp][i] = dot[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsAtOnce; ++i) {
      float sum = 0.0f;
      for (int k = 0; k < warps; ++k) sum += warp_dots[parity][k][i];
      dot[i] = sum;
    }
#pragma unroll
    for (int i = 0; i < kRowsAtOnce; ++i) {
      const int64_t row = r + i;
      if (row >= r1) break;
      float xv[8], gv[8];
      cuda::unpack_bf16<8>(xr[i], xv);
      cuda::unpack_bf16<8>(gr[i], gv);
      const float s = rstd[row];
      const float k = dot[i] / static_cast<float>(D) * s * s * s;
      float dv[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        dv[j] = s * (wv[j] * gv[j]) - xv[j] * k;
        dw[j] += gv[j] * (xv[j] * s);
      }
      if constexpr (kResidual) {
        float rv[8];
        cuda::unpack_bf16<8>(rr[i], rv);
#pragma unroll
        for (int j = 0; j < 8; ++j) dv[j] = rv[j] + dv[j];
      }
      cuda::store_bf16<8>(dx + row * D + col, dv);
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) partials[static_cast<int64_t>(blockIdx.x) * D + col + j] = dw[j];
}

// Whether rows_backward_kernel takes a row of D: whole warps of 8 columns each, at most
// kMaxRowThreads of them.
bool rows_pass_takes(int64_t D) {
  return D % 256 == 0 && D / 8 <= kMaxRowThreads;
}

// Its blocks: one wave of them. At ~128 registers a thread an SM holds 512 of its threads (one
// block at D = 4,096, two at 2,048), so blocks of 512 threads per SM, clamped as column_sum's
// row ranges (each block's partials are one of them).
int rows_pass_blocks(int64_t R, int64_t D, int sm_count) {
  const int64_t per_sm = kMaxRowThreads / (D / 8) < 1 ? 1 : kMaxRowThreads / (D / 8);
  return cuda::clamp_row_splits(per_sm * sm_count, R);
}

// The value dweight sums: dout * (x * rstd), per row and column.
template <int VEC>
struct DweightLoader {
  const bf16* x;
  const bf16* g;
  const float* rstd;
  int64_t D;
  __device__ void load(int64_t r, int64_t c, float (&v)[VEC]) const {
    float xv[VEC], gv[VEC];
    cuda::load_bf16<VEC>(x + r * D + c, xv);
    cuda::load_bf16<VEC>(g + r * D + c, gv);
    const float s = rstd[r];
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = gv[j] * (xv[j] * s);
  }
};

// The launches, as functors whose template operator() takes the group size and vector width.
struct ForwardLaunch {
  const bf16* x;
  const bf16* w;
  float eps;
  bf16* out;
  float* rstd;
  int64_t R;
  int D;
  cudaStream_t stream;
  template <int G, int PER>
  void held() const {
    rmsnorm_forward_held_kernel<G, PER>
        <<<cuda::blocks_for(R * G, kThreads), kThreads, 0, stream>>>(x, w, eps, out, rstd, R, D);
  }
  template <int G, int VEC>
  void operator()() const {
    if constexpr (VEC == 8 && G < 32) {
      // G < 32 is the next power of two above the row's chunks: one each (the two-pass kernel is
      // not instantiated for these).
      held<G, 1>();
    } else {
      if constexpr (VEC == 8) {
        // A whole warp's lanes hold up to 16 chunks each (D <= 4096).
        const int per_lane = (D / VEC + G - 1) / G;
        if (per_lane <= 2) return held<G, 2>();
        if (per_lane <= 4) return held<G, 4>();
        if (per_lane <= 8) return held<G, 8>();
        if (per_lane <= 16) return held<G, 16>();
      }
      rmsnorm_forward_kernel<G, VEC>
          <<<cuda::blocks_for(R * G, kThreads), kThreads, 0, stream>>>(x, w, eps, out, rstd, R, D);
    }
  }
};

struct BackwardLaunch {
  const bf16* x;
  const bf16* w;
  const float* rstd;
  const bf16* dout;
  const bf16* dres;
  bf16* dx;
  int64_t R;
  int D;
  cudaStream_t stream;
  template <int G, int VEC>
  void operator()() const {
    rmsnorm_backward_kernel<G, VEC>
        <<<cuda::blocks_for(R * G, kThreads), kThreads, 0, stream>>>(x, w, rstd, dout, dres, dx, R, D);
  }
};

// Calls f.template operator()<G, VEC>() with G, VEC fixed at compile time for this D.
template <typename F>
void dispatch_rows(int64_t D, bool vec, const F& f) {
  const int per_lane = vec ? 8 : 1;
  const int lanes = cuda::next_pow2((D + per_lane - 1) / per_lane);
  auto with_vec = [&](auto g_tag) {
    constexpr int G = decltype(g_tag)::value;
    if (vec)
      f.template operator()<G, 8>();
    else
      f.template operator()<G, 1>();
  };
  if (lanes <= 1)
    with_vec(std::integral_constant<int, 1>{});
  else if (lanes <= 2)
    with_vec(std::integral_constant<int, 2>{});
  else if (lanes <= 4)
    with_vec(std::integral_constant<int, 4>{});
  else if (lanes <= 8)
    with_vec(std::integral_constant<int, 8>{});
  else if (lanes <= 16)
    with_vec(std::integral_constant<int, 16>{});
  else
    with_vec(std::integral_constant<int, 32>{});
}

void check_common(const char* op, const Tensor& x, const Tensor& weight, const Tensor& rstd, int64_t* R,
                  int64_t* D) {
  cuda::expect_dtype(op, "weight", weight, DType::BF16);
  CUDA_OPS_EXPECT(weight.ndim == 1, op, cuda::describe("weight", weight) + ": expected (D)");
  *D = weight.shape[0];
  *R = cuda::expect_matrix(op, "x", x, *D, DType::BF16);
  cuda::expect_dtype(op, "rstd", rstd, DType::F32);
  CUDA_OPS_EXPECT(rstd.numel() == *R, op,
                  cuda::describe("rstd", rstd) + ": expected " + std::to_string(*R) + " rows");
  CUDA_OPS_EXPECT(*D < (int64_t{1} << 30), op, "D is too large");
}

}  // namespace

void CudaOps::rmsnorm_forward(Tensor x, Tensor weight, float eps, Tensor out, Tensor rstd) {
  const char* op = "rmsnorm_forward";
  int64_t R, D;
  check_common(op, x, weight, rstd, &R, &D);
  cuda::expect_like(op, "out", out, "x", x, DType::BF16);
  if (R == 0 || D == 0) return;
  const auto* xs = static_cast<const bf16*>(x.data);
  const auto* ws = static_cast<const bf16*>(weight.data);
  auto* ys = static_cast<bf16*>(out.data);
  auto* rs = static_cast<float*>(rstd.data);
  const bool vec = D % 8 == 0 && cuda::aligned16(xs) && cuda::aligned16(ws) && cuda::aligned16(ys);
  cudaStream_t stream = state_->stream;
  dispatch_rows(D, vec, ForwardLaunch{xs, ws, eps, ys, rs, R, static_cast<int>(D), stream});
  CHECK_CUDA_LAUNCH();
}

void CudaOps::rmsnorm_backward(Tensor x, Tensor weight, Tensor rstd, Tensor dout, Tensor dresidual, Tensor dx,
                               Tensor dweight) {
  const char* op = "rmsnorm_backward";
  int64_t R, D;
  check_common(op, x, weight, rstd, &R, &D);
  cuda::expect_like(op, "dout", dout, "x", x, DType::BF16);
  if (!dx.empty()) cuda::expect_like(op, "dx", dx, "x", x, DType::BF16);
  if (!dresidual.empty()) {
    CUDA_OPS_EXPECT(!dx.empty(), op, "dresidual is given without dx");
    cuda::expect_addend(op, "dresidual", dresidual, "dx", dx, DType::BF16);
  }
  if (!dweight.empty()) {
    cuda::expect_grad_dtype(op, "dweight", dweight);
    CUDA_OPS_EXPECT(
        cuda::same_shape(dweight, weight), op,
        cuda::describe("dweight", dweight) + " must have the shape of " + cuda::describe("weight", weight));
  }
  if (R == 0 || D == 0) return;
  const auto* xs = static_cast<const bf16*>(x.data);
  const auto* ws = static_cast<const bf16*>(weight.data);
  const auto* gs = static_cast<const bf16*>(dout.data);
  const auto* rs = static_cast<const float*>(rstd.data);
  cudaStream_t stream = state_->stream;
  const bool vec_in = D % 8 == 0 && cuda::aligned16(xs) && cuda::aligned16(ws) && cuda::aligned16(gs);

  if (!dx.empty() && !dweight.empty() && vec_in && rows_pass_takes(D) && cuda::aligned16(dx.data) &&
      cuda::aligned16(dresidual.data)) {
    const int blocks = rows_pass_blocks(R, D, state_->sm_count);
    const int64_t rows_per_block = (R + blocks - 1) / blocks;
    auto* partials = static_cast<float*>(state_->buffer(cuda::Scratch::kPartials, sizeof(float) * blocks * D,
                                                        "rmsnorm's dweight partial sums"));
    const auto* dres = static_cast<const bf16*>(dresidual.data);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, static_cast<unsigned int>(D / 8), 0, stream>>>(xs, ws, rs, gs, dres,
                                                                      static_cast<bf16*>(dx.data), partials,
                                                                      R, rows_per_block, static_cast<int>(D));
    };
    if (dres != nullptr)
      launch(rows_backward_kernel<true>);
    else
      launch(rows_backward_kernel<false>);
    CHECK_CUDA_LAUNCH();
    cuda::reduce_column_partials(partials, blocks, D, dweight.data, dweight.dtype, stream);
    return;
  }

  if (!dx.empty()) {
    auto* dxs = static_cast<bf16*>(dx.data);
    const auto* dres = static_cast<const bf16*>(dresidual.data);
    const bool vec = vec_in && cuda::aligned16(dxs) && cuda::aligned16(dres);
    dispatch_rows(D, vec, BackwardLaunch{xs, ws, rs, gs, dres, dxs, R, static_cast<int>(D), stream});
    CHECK_CUDA_LAUNCH();
  }

  if (!dweight.empty()) {
    const int vec = vec_in ? 8 : 1;
    const int splits = cuda::column_splits(R, D, vec, state_->sm_count);
    auto* partials = static_cast<float*>(state_->buffer(cuda::Scratch::kPartials, sizeof(float) * splits * D,
                                                        "rmsnorm's dweight partial sums"));
    if (vec_in)
      cuda::column_sum<8>(DweightLoader<8>{xs, gs, rs, D}, R, D, partials, splits, dweight.data,
                          dweight.dtype, stream);
    else
      cuda::column_sum<1>(DweightLoader<1>{xs, gs, rs, D}, R, D, partials, splits, dweight.data,
                          dweight.dtype, stream);
  }
}

}  // namespace ferry
