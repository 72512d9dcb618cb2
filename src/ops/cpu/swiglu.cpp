// SwiGLU gating of the MLP: out = silu(gate) * up with silu(g) = g * sigmoid(g), all (T,F).
// Elementwise, so threads take contiguous slices of the flattened tensors.
#include <cmath>

#include "core/thread_pool.h"
#include "ops/cpu/check.h"
#include "ops/cpu/cpu_ops.h"

namespace ferry {

namespace {
constexpr size_t kGrain = 1 << 14;
}

void CpuOps::swiglu_forward(Tensor gate, Tensor up, Tensor out) {
  const char* op = "swiglu_forward";
  cpu::expect_f32(op, "gate", gate);
  cpu::expect_like(op, "up", up, "gate", gate);
  cpu::expect_like(op, "out", out, "gate", gate);
  const float* g = gate.f32();
  const float* u = up.f32();
  float* y = out.f32();
  ThreadPool::global().parallel_for(
      gate.numel(),
      [&](size_t i0, size_t i1) {
        // g / (1 + exp(-g)) is how PyTorch evaluates silu in fp32.
        for (size_t i = i0; i < i1; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      },
      kGrain);
}

// dgate = dout * up * sig * (1 + g * (1 - sig)),  dup = dout * silu(g), out = silu(g) * up; each
// assigned where given.
void CpuOps::swiglu_backward(Tensor gate, Tensor up, Tensor dout, Tensor dgate, Tensor dup, Tensor out) {
  const char* op = "swiglu_backward";
  cpu::expect_f32(op, "gate", gate);
  cpu::expect_like(op, "up", up, "gate", gate);
  cpu::expect_like(op, "dout", dout, "gate", gate);
  if (!dgate.empty()) cpu::expect_like(op, "dgate", dgate, "gate", gate);
  if (!dup.empty()) cpu::expect_like(op, "dup", dup, "gate", gate);
  if (!out.empty()) cpu::expect_like(op, "out", out, "gate", gate);
  const float* g = gate.f32();
  const float* u = up.f32();
  const float* d = dout.f32();
  float* dg = dgate.empty() ? nullptr : dgate.f32();
  float* du = dup.empty() ? nullptr : dup.f32();
  float* y = out.empty() ? nullptr : out.f32();
  ThreadPool::global().parallel_for(
      gate.numel(),
      [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) {
          const float e = std::exp(-g[i]);
          const float sig = 1.0f / (1.0f + e);
          if (dg) dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
          const float silu = g[i] / (1.0f + e);  // exactly as the forward rounds it
          if (du) du[i] = d[i] * silu;
          if (y) y[i] = silu * u[i];
        }
      },
      kGrain);
}

}  // namespace ferry
