// The CPU backend's matrix products, with every output element's sum in one fixed order that does
// not depend on how many rows a call has or where a caller cut its tokens.
//
// Why not sgemm: OpenBLAS picks kernels and K-blocks by the matrix sizes (a 1-row product goes
// through gemv, a small one through a small-matrix kernel), so row t of x @ w^T changes bits with
// the number of rows around it, and a weight gradient summed over tokens in one call differs from
// the same sum split over calls. A layer run over sequence tiles (model/sequence_tiles.h) must give
// the untiled layer's bits, so here:
// * a row of the output depends only on that row of the input (row-invariant);
// * a weight gradient adds its tokens one after another onto the value it already holds, so
//   dw += A then dw += B is dw += [A; B] bit for bit (token-sequential).
// Loops are elementwise or fixed-lane (ops/cpu/vec_math.h's rules): no FMA, same bits on every
// machine and for every thread count.
#pragma once

#include <cstdint>

namespace ferry::cpu {

// y (T,N) = x (T,K) @ w (N,K)^T: each element a fixed 8-lane dot product over K.
void ordered_gemm_xwt(const float* x, const float* w, float* y, int64_t T, int64_t N, int64_t K);

// dx (T,K) = dy (T,N) @ w (N,K): each element summed over n = 0..N-1 in order.
void ordered_gemm_dyw(const float* dy, const float* w, float* dx, int64_t T, int64_t N, int64_t K);

// dw (N,K) += dy (T,N)^T @ x (T,K): each element adds t = 0..T-1 in order onto its own value.
void ordered_gemm_dw(const float* dy, const float* x, float* dw, int64_t T, int64_t N, int64_t K);

}  // namespace ferry::cpu
