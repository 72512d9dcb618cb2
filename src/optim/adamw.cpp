// The fp32 operation order below is torch's (see adamw.h). A compiler allowed to contract a*b+c into
// an FMA (GCC's default -ffp-contract=fast once FMA instructions are enabled, e.g. by -march=native)
// would round differently from torch, so contraction is switched off for this file (CMakeLists.txt:
// the files of the torch-exact arithmetic); the FMAs that torch's kernels do perform (lerp,
// addcmul) are written explicitly with std::fma.

#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "optim/adamw_scalars.h"

namespace ferry {

namespace {

// Below this many elements a tensor is updated on the calling thread: waking the pool costs more.
constexpr size_t kGrain = size_t{1} << 15;

// The loop body. Every operation is a correctly rounded IEEE operation (mul, add, div, sqrt, fma), so
// the result is the same however it is compiled (with or without FMA hardware). This is the reference,
// kept scalar and obvious; the fast CPU AdamW is a separate SIMD kernel tested against it.
// kLerpSmall picks torch's lerp branch: weight < 0.5 → self + weight*(end - self) as one fused
// multiply-add; weight >= 0.5 (beta1 <= 0.5) → end - (end - self)*(1 - weight), also fused.
template <bool kLerpSmall>
[[gnu::always_inline]] inline void update_loop(float* __restrict__ param, float* __restrict__ m,
                                               float* __restrict__ v, const float* __restrict__ grad,
                                               size_t begin, size_t end, const AdamWScalars& s,
                                               float decay_factor, float grad_scale) {
  const float lerp_coef = kLerpSmall ? s.lerp_weight : s.lerp_weight - 1.0f;
  for (size_t i = begin; i < end; ++i) {
    const float g = grad[i] * grad_scale;
    // decay_factor is exactly 1 for tensors without decay, and p * 1 == p.
    float p = param[i] * decay_factor;
    const float mi = m[i];
    const float m_new = std::fma(lerp_coef, g - mi, kLerpSmall ? mi : g);
    // torch's addcmul source reads self + s*t1*t2, but its released CPU kernels are compiled with FMA
    // contraction, which makes it fma(s*t1, t2, self); this is the form that matches torch bit for bit.
    const float vi = std::fma(s.one_minus_beta2 * g, g, v[i] * s.beta2);
    const float denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p = p + s.neg_step_size * m_new / denom;
    m[i] = m_new;
    v[i] = vi;
    param[i] = p;
  }
}

[[gnu::always_inline]] inline void update_body(float* param, float* m, float* v, const float* grad,
                                               size_t begin, size_t end, const AdamWScalars& s,
                                               float decay_factor, float grad_scale) {
  if (s.lerp_weight < 0.5f)
    update_loop<true>(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
  else
    update_loop<false>(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
}

#if defined(__x86_64__) && defined(__GNUC__)
// Compiled for FMA hardware, std::fma is one instruction; otherwise it is a libm call (same result,
// about half the speed of the whole update).
[[gnu::target("avx2,fma")]] void update_range_fma(float* param, float* m, float* v, const float* grad,
                                                  size_t begin, size_t end, const AdamWScalars& s,
                                                  float decay_factor, float grad_scale) {
  update_body(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
}
#endif

void update_range(float* param, float* m, float* v, const float* grad, size_t begin, size_t end,
                  const AdamWScalars& s, float decay_factor, float grad_scale) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (has_fma) return update_range_fma(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
#endif
  update_body(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
}

}  // namespace

void validate_adamw_hyper(const AdamWHyper& h) {
  // The checks and their order are torch.optim.AdamW's constructor's; `!(x >= 0)` also rejects NaN.
  FERRY_CHECK(h.lr >= 0.0, "optim", "invalid learning rate {}; it must be >= 0", h.lr);
  FERRY_CHECK(h.eps >= 0.0, "optim", "invalid AdamW eps {}; it must be >= 0", h.eps);
  FERRY_CHECK(h.beta1 >= 0.0 && h.beta1 < 1.0, "optim", "invalid AdamW beta1 {}; it must be in [0, 1)",
              h.beta1);
  FERRY_CHECK(h.beta2 >= 0.0 && h.beta2 < 1.0, "optim", "invalid AdamW beta2 {}; it must be in [0, 1)",
              h.beta2);
  FERRY_CHECK(h.weight_decay >= 0.0, "optim", "invalid weight_decay {}; it must be >= 0", h.weight_decay);
}

void adamw_step(float* param, float* m, float* v, const float* grad, size_t n, const AdamWHyper& hyper,
                int64_t step, bool decay, float grad_scale) {
  FERRY_ASSERT(step >= 1, "AdamW steps count from 1");
  if (n == 0) return;
  FERRY_ASSERT(param && m && v && grad);
  const AdamWScalars s = adamw_scalars(hyper, step);
  const float decay_factor = decay ? s.decay_factor : 1.0f;
  ThreadPool::global().parallel_for(
      n,
      [&](size_t begin, size_t end) {
        update_range(param, m, v, grad, begin, end, s, decay_factor, grad_scale);
      },
      kGrain);
}

}  // namespace ferry
