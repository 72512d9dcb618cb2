#include "planner/nominal_profile.h"

namespace ferry {

MachineProfile nominal_profile(const ModelConfig& c, int64_t seq_len, DType weight_dtype,
                               const NominalRates& r) {
  const double H = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double q_dim = static_cast<double>(c.q_dim()), kv_dim = static_cast<double>(c.kv_dim());
  const double V = static_cast<double>(c.vocab_size), S = static_cast<double>(seq_len);
  const double wd = static_cast<double>(dtype_size(weight_dtype));
  // Weight parameters of one layer's projections: q, k, v, o, then gate, up, down.
  const double layer_params = H * q_dim + 2 * H * kv_dim + q_dim * H + 3 * H * F;
  const double forward_flops = 2 * layer_params + 2 * S * q_dim;  // per token

  MachineProfile p;
  p.device_name = "nominal (DESIGN.md §5 rates of the lent H200 machine, not measured)";
  p.device_memory_bytes = 141e9;
  p.device_uncapped_memory_bytes = p.device_memory_bytes;
  p.shape_key = model_shape_key(c, seq_len, weight_dtype);
  p.seq_len = seq_len;
  p.weight_dtype = weight_dtype;
  // Kernel counts per micro-chunk: a layer's forward launches ~20 kernels, its backward with the
  // recompute ~60; the head's fused loss ~10 per 1024-token chunk of logits; the embedding 1 and 4.
  p.compute.layer_forward = {20 * r.launch_s, forward_flops / r.gemm_flops_per_s};
  p.compute.layer_backward = {60 * r.launch_s, 3 * forward_flops / r.gemm_flops_per_s};
  p.compute.head = {10 * r.launch_s, 6 * H * V / r.gemm_flops_per_s + 10 * r.launch_s / 1024};
  p.compute.head_f32_grads = p.compute.head;
  p.compute.head_grouped = p.compute.head;
  p.compute.head_f32_grads_grouped = p.compute.head;
  // The embedding moves a row in and out per token (forward), and sorts and accumulates (backward).
  p.compute.embedding_forward = {r.launch_s, 2 * H * wd / r.hbm_bytes_per_s};
  p.compute.embedding_backward = {4 * r.launch_s, 4 * H * wd / r.hbm_bytes_per_s};
  p.compute.gpu_adamw_params_per_s = r.gpu_adamw_params_per_s;
  p.compute.grad_norm_params_per_s = r.hbm_bytes_per_s / wd;  // reads the gradient once
  p.transfer = {r.h2d_bytes_per_s, r.d2h_bytes_per_s, r.duplex_h2d_bytes_per_s, r.duplex_d2h_bytes_per_s,
                r.copy_latency_s};
  p.host.threads = r.threads;
  p.host.cpu_adamw_params_per_s = r.cpu_adamw_params_per_s;
  p.host.memory_bytes = r.memory_bytes;
  p.host.disk_read_bytes_per_s = r.disk_read_bytes_per_s;
  p.host.disk_write_bytes_per_s = r.disk_write_bytes_per_s;
  return p;
}

}  // namespace ferry
