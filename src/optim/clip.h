// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2).
//
// torch computes the norm in fp32 as a norm of per-tensor norms, ||[||g1||, ||g2||, ...]||, with
// torch.linalg.vector_norm, accumulating in fp32 SIMD lanes, so its last bits depend on the vector width
// of the machine (AVX2 vs AVX-512) and no fixed order could reproduce it everywhere. We compute
// sqrt(sum of all g^2) with the sum in double, in a fixed order, so the result does not depend on the
// thread count or on how gradients are split into tensors; it differs from torch's fp32 value by
// rounding only (about one fp32 ulp: 16.4208965 vs torch's 16.4208946 in
// tests/optim_adamw_torch_golden_test.cpp). clip_coefficient rounds it to float first, since torch's
// total_norm is an fp32 tensor; from the same norm it gives torch's coefficient bit for bit.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace ferry {

// The L2 norm over all elements of all gradients: sqrt(sum g^2), summed in double.
// Deterministic: the elements are cut into fixed-size chunks (independent of the thread pool's size),
// each chunk is summed in a fixed order (sum_squares in clip.cpp), and the chunk sums are added in order.
double global_grad_norm(const std::vector<std::pair<const float*, size_t>>& grads);

// The factor every gradient is multiplied by: torch's clip_coef_clamped =
// clamp(max_norm / (total_norm + 1e-6), max=1.0), in fp32 as torch computes it. torch multiplies the
// gradients by it always, even when it is 1, so callers do too (pass it as adamw_step's grad_scale).
// max_norm <= 0 means no clipping: the coefficient is 1. A non-finite total_norm gives what torch
// gives (inf → 0, NaN → NaN); callers decide whether to skip such a step.
// The building blocks of global_grad_norm, for callers that receive gradients unit by unit: the
// sums of squares of fixed 8Ki-element chunks of `grads`, in order. Concatenating the partials of
// consecutive calls and summing them with norm_from_partials gives exactly global_grad_norm of all
// the spans together.
std::vector<double> grad_sumsq_partials(const std::vector<std::pair<const float*, size_t>>& grads);
// Elements per partial sum, and the number of partials of one span of n elements.
constexpr size_t kGradNormChunk = size_t{1} << 13;
// Inside a chunk, element i is summed into column i % kGradNormColumns, the columns then combined by
// a fixed tree (clip.cpp's sum_squares): an order a GPU warp reproduces while reading coalesced.
constexpr size_t kGradNormColumns = 128;
constexpr size_t grad_sumsq_chunks(size_t n) {
  return (n + kGradNormChunk - 1) / kGradNormChunk;
}
// The same for gradients kept in F32 or BF16: a bf16 value widens to fp32 exactly, so the partials
// of bf16 gradients equal those of the same gradients converted to fp32 first (no fp32 copy needed).
struct GradSpan {
  const void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::F32;
};
std::vector<double> grad_sumsq_partials(std::span<const GradSpan> grads);
double norm_from_partials(const std::vector<double>& partials);

float clip_coefficient(double total_norm, double max_norm);

}  // namespace ferry
