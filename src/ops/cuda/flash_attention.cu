// Flash attention entry points: argument checks, the choice of kernels, and the two small kernels
// of the backward's bookkeeping (delta = rowsum(dout * out), dq accumulator -> bf16).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/cuda_check.h"
#include "core/env_switch.h"
#include "ops/cuda/flash_attention.h"
#include "ops/cuda/flash_attention_internal.h"
#include "ops/cuda_ops_sizes.h"

namespace ferry {
namespace flash {

size_t delta_bytes(int64_t tokens, int q_heads) {
  return flash_attention_delta_bytes(tokens, q_heads);
}

namespace {

bool tensor_core_head_dim(int head_dim) {
  return flash_attention_tensor_core_head_dim(head_dim);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The checks shared by forward and backward; `op` names the caller in messages.
void check_params(const char* op, const FlashAttentionParams& p) {
  auto fail = [&](const std::string& what) { raise(op, what); };
  if (p.tokens < 0 || p.tokens > INT_MAX / 2)
    fail("tokens = " + std::to_string(p.tokens) + ": expected 0 <= T <= 2^30");
  if (p.q_heads < 1 || p.kv_heads < 1 || p.q_heads % p.kv_heads != 0)
    fail("q_heads = " + std::to_string(p.q_heads) + ", kv_heads = " + std::to_string(p.kv_heads) +
         ": need both positive and q_heads a multiple of kv_heads");
  if (p.head_dim < 1 || p.head_dim > 256)
    fail("head_dim = " + std::to_string(p.head_dim) + ": flash attention supports 1..256");
  if (p.tokens > 0 && (!p.q || !p.k || !p.v || !p.out || !p.lse || !p.doc_start))
    fail("a null pointer among q, k, v, out, lse, doc_start");
  if (p.tokens * p.q_heads > 4LL * INT_MAX)
    fail("tokens * q_heads = " + std::to_string(p.tokens * p.q_heads) + ": too many rows for one launch");
  // Grid limits: the tensor-core kernels put 64-key / 128-query tiles on grid y (<= 65535).
  if (tensor_core_head_dim(p.head_dim) && p.tokens > 64LL * 65535)
    fail("tokens = " + std::to_string(p.tokens) + ": the tensor-core kernels take at most 64 * 65535 tokens");
}

// The current device and its compute capability as 10 major + minor.
struct DeviceCapability {
  int device = 0, major = 0, minor = 0;
  int value() const { return 10 * major + minor; }
};

DeviceCapability current_capability() {
  DeviceCapability c;
  FERRY_CUDA_CHECK(cudaGetDevice(&c.device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&c.major, cudaDevAttrComputeCapabilityMajor, c.device));
  FERRY_CUDA_CHECK(cudaDeviceGetAttribute(&c.minor, cudaDevAttrComputeCapabilityMinor, c.device));
  return c;
}

// The tensor-core kernels need sm_80+ and 16-byte aligned rows. Returns the device's compute
// capability as 10 major + minor.
int check_tensor_core(const char* op, std::initializer_list<const void*> pointers) {
  const DeviceCapability c = current_capability();
  if (c.major < 8)
    raise(op,
          "head_dim 64 and 128 use bf16 tensor cores, which need compute capability 8.0 or newer (device " +
              std::to_string(c.device) + " has " + std::to_string(c.major) + ".x)");
  for (const void* p : pointers)
    if (!aligned16(p))
      raise(op,
            "q, k, v, out (and dout, dq, dk, dv) must be 16-byte aligned for head_dim 64 and 128 (rows are "
            "read as 16-byte "
            "pieces); allocate them with cudaMalloc or at aligned offsets");
  return c.value();
}

// The wgmma kernels' machine code is sm_90a's, which runs on compute capability 9.0 alone; there
// they are 1.6-1.7x the mma.sync kernels at head_dim 128 (docs/performance.md, twenty-third session).
// FERRY_FLASH_WGMMA=0 keeps the mma.sync kernels, for A/B comparisons and to rule wgmma out.
bool wgmma_runs(int compute_capability) {
#if FERRY_HAVE_SM90A
  return compute_capability == 90 && env_switch_on("FERRY_FLASH_WGMMA");
#else
  (void)compute_capability;
  return false;
#endif
}

void check_backward(const char* op, const FlashAttentionBackwardParams& p) {
  check_params(op, p.fwd);
  if (p.fwd.tokens > 0 && (!p.dout || !p.dq || !p.dk || !p.dv || !p.workspace))
    raise(op, "a null pointer among dout, dq, dk, dv, workspace");
  const size_t need =
      flash_attention_backward_workspace(p.fwd.tokens, p.fwd.q_heads, p.fwd.kv_heads, p.fwd.head_dim);
  if (p.workspace_bytes < need)
    raise(op, "workspace of " + std::to_string(p.workspace_bytes) + " bytes, need " + std::to_string(need) +
                  " (flash_attention_backward_workspace)");
  if (p.fwd.tokens > 0 && !aligned16(p.workspace)) raise(op, "workspace must be 16-byte aligned");
}

}  // namespace
}  // namespace flash

size_t flash_attention_backward_workspace(int64_t tokens, int q_heads, int /*kv_heads*/, int head_dim) {
  return flash_attention_backward_workspace_bytes(tokens, q_heads, head_dim);
}

namespace {

// The forward of flash_attention_forward (`allow_wgmma`) and of _sm80 (not); `op` names the caller.
void run_forward(const char* op, const FlashAttentionParams& p, bool allow_wgmma, void* stream) {
  flash::check_params(op, p);
  if (p.tokens == 0) return;
  if (!flash::tensor_core_head_dim(p.head_dim)) {
    flash::forward_simple(p, stream);
    return;
  }
  const int capability = flash::check_tensor_core(op, {p.q, p.k, p.v, p.out});
  if (allow_wgmma && flash::wgmma_runs(capability))
    flash::forward_wgmma(p, stream);
  else
    flash::forward_tensor_core(p, stream);
}

}  // namespace

void flash_attention_forward(const FlashAttentionParams& p, void* stream) {
  run_forward("flash_attention_forward", p, true, stream);
}

void flash_attention_forward_sm80(const FlashAttentionParams& p, void* stream) {
  run_forward("flash_attention_forward_sm80", p, false, stream);
}

bool flash_attention_wgmma_built() {
#if FERRY_HAVE_SM90A
  return true;
#else
  return false;
#endif
}

bool flash_attention_forward_uses_wgmma(int head_dim) {
  return flash::tensor_core_head_dim(head_dim) && flash::wgmma_runs(flash::current_capability().value());
}

void flash_attention_forward_simple(const FlashAttentionParams& p, void* stream) {
  flash::check_params("flash_attention_forward_simple", p);
  if (p.tokens == 0) return;
  flash::forward_simple(p, stream);
}

namespace {

// The backward of flash_attention_backward (`allow_wgmma`) and of _sm80 (not): delta, then the
// simple kernels, or the zeroed fp32 dq accumulator, one of the two tensor-core kernels and dq in
// bf16. `op` names the caller.
void run_backward(const char* op, const FlashAttentionBackwardParams& p, bool allow_wgmma, void* stream) {
  flash::check_backward(op, p);
  if (p.fwd.tokens == 0) return;
  float* const delta = static_cast<float*>(p.workspace);
  if (!flash::tensor_core_head_dim(p.fwd.head_dim)) {
    flash::compute_delta(p, delta, stream);
    flash::backward_simple(p, delta, stream);
    return;
  }
  const int capability =
      flash::check_tensor_core(op, {p.fwd.q, p.fwd.k, p.fwd.v, p.fwd.out, p.dout, p.dq, p.dk, p.dv});
  flash::compute_delta(p, delta, stream);
  float* const dq_accum = reinterpret_cast<float*>(static_cast<char*>(p.workspace) +
                                                   flash::delta_bytes(p.fwd.tokens, p.fwd.q_heads));
  const int64_t count = p.fwd.tokens * p.fwd.q_heads * p.fwd.head_dim;
  FERRY_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, sizeof(float) * count, static_cast<cudaStream_t>(stream)));
  if (allow_wgmma && flash::wgmma_runs(capability))
    flash::backward_wgmma(p, delta, dq_accum, stream);
  else
    flash::backward_tensor_core(p, delta, dq_accum, stream);
  flash::convert_dq(dq_accum, p.dq, p.fwd.scale, count, stream);
}

}  // namespace

void flash_attention_backward(const FlashAttentionBackwardParams& p, void* stream) {
  run_backward("flash_attention_backward", p, true, stream);
}

void flash_attention_backward_sm80(const FlashAttentionBackwardParams& p, void* stream) {
  run_backward("flash_attention_backward_sm80", p, false, stream);
}

void flash_attention_backward_simple(const FlashAttentionBackwardParams& p, void* stream) {
  const char* op = "flash_attention_backward_simple";
  flash::check_backward(op, p);
  if (p.fwd.tokens == 0) return;
  float* const delta = static_cast<float*>(p.workspace);
  flash::compute_delta(p, delta, stream);
  flash::backward_simple(p, delta, stream);
}

}  // namespace ferry
