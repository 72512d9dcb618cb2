// Linear layer on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, one rounding of the
// result. The row-major products of ferry and their column-major (cuBLASLt) forms, with
// x (T,in), w (out,in), dy (T,out) row-major:
//   y  (T,out)  = x @ w^T   ->  y^T  (out,T)  = op_T(w: in x out) * x^T (in x T)   m=out k=in n=T
//   dx (T,in)   = dy @ w    ->  dx^T (in,T)   = w (in x out)      * dy^T (out x T) m=in  k=out n=T
//   dw (out,in) += dy^T @ x ->  dw^T (in,out) = x^T (in x T)      * op_T(dy^T: out x T)
//                                                                                   m=in  k=T   n=out
// The bias of the forward is cuBLASLt's BIAS epilogue (added in fp32 before the rounding). A
// residual of the forward is cuBLASLt's C with beta = 1, and an accumulated dx is C = D with beta = 1:
// D = round(product + bias + C), one rounding where a product then add() rounds twice, and no
// extra pass over the activations. dw accumulates with beta = 1 into an F32 gradient. Into a BF16
// one it accumulates out of place, C = dw and D a bf16 scratch (round(product + dw), one rounding:
// in place, C = D, cuBLASLt rounds the product to bf16 before adding), then copied back: 8 bytes
// of traffic per element where an fp32 product and a separate add moved 12. dbias is a
// deterministic column sum (column_sum.cuh).
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/cuda_ops_state.cuh"

namespace ferry {

namespace {

using bf16 = __nv_bfloat16;

// Returns T after checking x (T,in) and w (out,in), both BF16.
int64_t check_xw(const char* op, const Tensor& x, const Tensor& w, int64_t* in_features,
                 int64_t* out_features) {
  cuda::expect_dtype(op, "w", w, DType::BF16);
  CUDA_OPS_EXPECT(w.ndim == 2, op, cuda::describe("w", w) + ": expected (out, in)");
  *out_features = w.shape[0];
  *in_features = w.shape[1];
  return cuda::expect_matrix(op, "x", x, *in_features, DType::BF16);
}

// grad (bf16) += product (fp32), rounded once: cuBLASLt's beta = 1 into a bf16 output was seen
// to round worse than once on the H200 (errors of several bf16 ulps in the parity test).
// y (T,out) = residual + bias broadcast over the rows, either optional (the product with in == 0).
// residual may be y: each element is read before it is written, by the same thread.
template <typename T>
__global__ void broadcast_rows_kernel(const T* __restrict__ bias, const T* residual, T* y, int64_t rows,
                                      int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const float b = bias != nullptr ? cuda::to_float(bias[i % cols]) : 0.0f;
  y[i] = cuda::from_float<T>(residual != nullptr ? cuda::to_float(residual[i]) + b : b);
}

template <typename T>
void broadcast_rows(const Tensor& bias, const Tensor& residual, const Tensor& y, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  broadcast_rows_kernel<<<cuda::blocks_for(rows * cols, 256), 256, 0, stream>>>(
      static_cast<const T*>(bias.data), static_cast<const T*>(residual.data), static_cast<T*>(y.data), rows,
      cols);
  CHECK_CUDA_LAUNCH();
}

struct ColumnLoader8 {
  const bf16* y;
  int64_t cols;
  __device__ void load(int64_t r, int64_t c, float (&v)[8]) const { cuda::load_bf16<8>(y + r * cols + c, v); }
};
struct ColumnLoader1 {
  const bf16* y;
  int64_t cols;
  __device__ void load(int64_t r, int64_t c, float (&v)[1]) const { cuda::load_bf16<1>(y + r * cols + c, v); }
};

}  // namespace

void CudaOps::linear_forward(Tensor x, Tensor w, Tensor bias, Tensor residual, Tensor y) {
  const char* op = "linear_forward";
  int64_t in, out;
  const int64_t T = check_xw(op, x, w, &in, &out);
  CUDA_OPS_EXPECT(y.dtype == DType::BF16 || y.dtype == DType::F32, op,
                  cuda::describe("y", y) + ": BF16 or F32");
  CUDA_OPS_EXPECT(cuda::expect_matrix(op, "y", y, out, y.dtype) == T, op,
                  cuda::describe("y", y) + " and " + cuda::describe("x", x) + " must have the same rows");
  if (!bias.empty()) {
    cuda::expect_dtype(op, "bias", bias, y.dtype);
    CUDA_OPS_EXPECT(bias.ndim == 1 && bias.shape[0] == out, op,
                    cuda::describe("bias", bias) + ": expected (" + std::to_string(out) + ")");
    CUDA_OPS_EXPECT(cuda::aligned16(bias.data), op,
                    "bias must be 16-byte aligned (unit layouts align every tensor)");
  }
  if (!residual.empty()) cuda::expect_addend(op, "residual", residual, "y", y, y.dtype);
  if (T == 0 || out == 0) return;
  cudaStream_t stream = state_->stream;
  if (in == 0) {
    if (bias.empty() && residual.empty())
      FERRY_CUDA_CHECK(cudaMemsetAsync(y.data, 0, y.bytes(), stream));
    else if (y.dtype == DType::BF16)
      broadcast_rows<bf16>(bias, residual, y, T, out, stream);
    else
      broadcast_rows<float>(bias, residual, y, T, out, stream);
    return;
  }
  cuda::MatmulArgs a;
  a.trans_a = true;
  a.m = out;
  a.n = T;
  a.k = in;
  a.a = w.data;
  a.lda = in;
  a.b = x.data;
  a.ldb = in;
  a.d = y.data;
  a.d_type = cuda::lt_type(y.dtype);
  a.ldd = out;
  a.bias = bias.empty() ? nullptr : bias.data;
  if (!residual.empty()) {
    a.c = residual.data;
    a.beta = 1.0f;
  }
  state_->gemm.matmul(a, stream);
}

void CudaOps::linear_backward(Tensor x, Tensor w, Tensor dy, Tensor dx, Tensor dw, Tensor dbias,
                              bool accumulate_dx) {
  const char* op = "linear_backward";
  int64_t in, out;
  const int64_t T = check_xw(op, x, w, &in, &out);
  CUDA_OPS_EXPECT(cuda::expect_matrix(op, "dy", dy, out, DType::BF16) == T, op,
                  cuda::describe("dy", dy) + " and " + cuda::describe("x", x) + " must have the same rows");
  if (!dx.empty()) cuda::expect_like(op, "dx", dx, "x", x, DType::BF16);
  if (!dw.empty()) {
    cuda::expect_grad_dtype(op, "dw", dw);
    CUDA_OPS_EXPECT(cuda::same_shape(dw, w), op,
                    cuda::describe("dw", dw) + " must have the shape of " + cuda::describe("w", w));
  }
  if (!dbias.empty()) {
    cuda::expect_grad_dtype(op, "dbias", dbias);
    CUDA_OPS_EXPECT(dbias.ndim == 1 && dbias.shape[0] == out, op,
                    cuda::describe("dbias", dbias) + ": expected (" + std::to_string(out) + ")");
  }
  if (T == 0) return;
  cudaStream_t stream = state_->stream;

  if (!dx.empty() && in > 0) {
    if (out == 0) {
      if (!accumulate_dx) FERRY_CUDA_CHECK(cudaMemsetAsync(dx.data, 0, dx.bytes(), stream));
    } else {
      cuda::MatmulArgs a;
      a.m = in;
      a.n = T;
      a.k = out;
      a.a = w.data;
      a.lda = in;
      a.b = dy.data;
      a.ldb = out;
      a.d = dx.data;
      a.ldd = in;
      a.beta = accumulate_dx ? 1.0f : 0.0f;
      state_->gemm.matmul(a, stream);
    }
  }
  if (!dw.empty() && in > 0 && out > 0) {
    cuda::MatmulArgs a;
    a.trans_b = true;
    a.m = in;
    a.n = out;
    a.k = T;
    a.a = x.data;
    a.lda = in;
    a.b = dy.data;
    a.ldb = out;
    a.ldd = in;
    if (dw.dtype == DType::BF16) {
      const size_t bytes = sizeof(bf16) * static_cast<size_t>(in * out);
      void* sum = state_->buffer(cuda::Scratch::kWeightGrad, bytes, "linear's bf16 weight-gradient sum");
      a.c = dw.data;
      a.d = sum;
      a.beta = 1.0f;
      state_->gemm.matmul(a, stream);
      FERRY_CUDA_CHECK(cudaMemcpyAsync(dw.data, sum, bytes, cudaMemcpyDeviceToDevice, stream));
    } else {
      a.d = dw.data;
      a.d_type = cuda::lt_type(dw.dtype);
      a.beta = 1.0f;
      state_->gemm.matmul(a, stream);
    }
  }
  if (!dbias.empty() && out > 0) {
    const auto* g = static_cast<const bf16*>(dy.data);
    const bool vec = out % 8 == 0 && cuda::aligned16(g);
    const int splits = cuda::column_splits(T, out, vec ? 8 : 1, state_->sm_count);
    auto* partials = static_cast<float*>(state_->buffer(
        cuda::Scratch::kPartials, sizeof(float) * splits * out, "linear's dbias partial sums"));
    if (vec)
      cuda::column_sum<8>(ColumnLoader8{g, out}, T, out, partials, splits, dbias.data, dbias.dtype, stream);
    else
      cuda::column_sum<1>(ColumnLoader1{g, out}, T, out, partials, splits, dbias.data, dbias.dtype, stream);
  }
}

}  // namespace ferry
