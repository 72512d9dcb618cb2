#include "profiler/profile_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "core/byte_size.h"
#include "model/unit_layout.h"
#include "optim/state_format.h"

namespace ferry {

namespace {

std::string rate(double bytes_per_s) {
  return fmt::format("{:.1f} GB/s", bytes_per_s / 1e9);
}
std::string params_rate(double per_s) {
  return per_s > 0 ? fmt::format("{:.2f} G params/s", per_s / 1e9) : "-";
}

// "0.120 ms + 1.234 us/token  (at 2048 tokens: 2.647 ms)", and the model FLOP rate when given.
std::string linear(const LinearTime& t, int64_t tokens, double flops_per_token = 0.0) {
  std::string s = fmt::format("{:8.3f} ms + {:8.4f} us/token   at {} tokens: {:8.3f} ms", t.fixed_s * 1e3,
                              t.per_token_s * 1e6, tokens, t.at(tokens) * 1e3);
  if (flops_per_token > 0)
    s += fmt::format("  ({:.3g} TFLOP/s)",
                     flops_per_token * static_cast<double>(tokens) / t.at(tokens) / 1e12);
  return s;
}

}  // namespace

void print_profile(const MachineProfile& p, const ModelConfig& model) {
  // FLOPs per token of one layer's forward: 2 per weight, plus causal attention's QK^T and PV
  // (2 * 2 * seq_len * q_dim, halved by the causal mask). The backward with its recompute: 3x.
  const ModelLayout layout = build_model_layout(model);
  const double layer_flops = 2.0 * static_cast<double>(layout.units[layout.layer_unit(0)].numel) +
                             2.0 * static_cast<double>(p.seq_len * model.q_dim());
  const double head_flops = 6.0 * static_cast<double>(model.vocab_size * model.hidden_size);
  const int64_t T = p.seq_len;
  std::printf("machine profile: %s, %s of device memory", p.device_name.c_str(),
              format_bytes(static_cast<size_t>(p.device_memory_bytes)).c_str());
  // Measured under a gpu_memory budget: what the device has without one, too.
  if (p.device_uncapped_memory_bytes > 0 && p.device_uncapped_memory_bytes != p.device_memory_bytes)
    std::printf(" (its budget; %s without one)",
                format_bytes(static_cast<size_t>(p.device_uncapped_memory_bytes)).c_str());
  std::printf("\n");
  std::printf("model shape:     %s\n", p.shape_key.c_str());
  std::printf("measured by:     %s, method %d\n\n",
              p.kernels.empty() ? "(kernels not recorded)" : p.kernels.c_str(), p.method);
  std::printf("compute (one micro-chunk: fixed + per token)\n");
  std::printf("  layer forward       %s\n", linear(p.compute.layer_forward, T, layer_flops).c_str());
  std::printf("  layer backward      %s\n", linear(p.compute.layer_backward, T, 3 * layer_flops).c_str());
  std::printf("  head fwd+bwd        %s\n", linear(p.compute.head, T, head_flops).c_str());
  std::printf("  head, fp32 grads    %s\n", linear(p.compute.head_f32_grads, T, head_flops).c_str());
  std::printf("  head, dw grouped    %s\n", linear(p.compute.head_grouped, T, head_flops).c_str());
  std::printf("  ... and fp32 grads  %s\n", linear(p.compute.head_f32_grads_grouped, T, head_flops).c_str());
  std::printf("  embedding forward   %s\n", linear(p.compute.embedding_forward, T).c_str());
  std::printf("  embedding backward  %s\n", linear(p.compute.embedding_backward, T).c_str());
  std::printf("  device AdamW        %s\n", params_rate(p.compute.gpu_adamw_params_per_s).c_str());
  std::printf("  gradient norm       %s\n\n", params_rate(p.compute.grad_norm_params_per_s).c_str());
  std::printf("transfer (pinned)\n");
  std::printf("  h2d alone           %s\n", rate(p.transfer.h2d_bytes_per_s).c_str());
  std::printf("  d2h alone           %s\n", rate(p.transfer.d2h_bytes_per_s).c_str());
  std::printf("  both at once        h2d %s, d2h %s\n", rate(p.transfer.duplex_h2d_bytes_per_s).c_str(),
              rate(p.transfer.duplex_d2h_bytes_per_s).c_str());
  std::printf("  latency per copy    %.1f us\n\n", p.transfer.latency_s * 1e6);
  std::printf("host\n");
  std::printf("  CPU AdamW           %s on %d threads\n", params_rate(p.host.cpu_adamw_params_per_s).c_str(),
              p.host.threads);
  for (const auto f : kLeanStateFormats) {
    const double rate = p.host.lean_adamw_params_per_s[static_cast<int>(f)];
    if (rate > 0) std::printf("  lean AdamW %-9s %s\n", state_format_name(f), params_rate(rate).c_str());
  }
  if (p.host.memory_sharing_measured) {
    const HostMemorySharing& m = p.host.memory_sharing;
    std::printf(
        "  beside copies       CPU AdamW at %.2f of its rate beside one direction, %.2f beside both; copies "
        "at %.2f alone, %.2f in duplex beside it (host DRAM shared)\n",
        m.cpu_beside_copy, m.cpu_beside_duplex, m.copy_beside_cpu, m.duplex_beside_cpu);
  }
  std::printf("  RAM                 %s\n", format_bytes(static_cast<size_t>(p.host.memory_bytes)).c_str());
  if (p.host.disk_write_bytes_per_s > 0)
    std::printf("  disk                write %s, read %s\n", rate(p.host.disk_write_bytes_per_s).c_str(),
                rate(p.host.disk_read_bytes_per_s).c_str());
  else
    std::printf("  disk                not measured\n");
}

}  // namespace ferry
