// Model shapes and machine profiles for the planner's tests: real model shapes from config.json
// values (no weights needed to plan), and synthetic profiles whose numbers make the expected
// predictions computable by hand.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"
#include "planner/profile.h"

namespace ferry::test {

// A Llama config.json with these values.
inline ModelConfig llama_shape(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t layers,
                               int64_t heads, int64_t kv_heads, bool tied) {
  const nlohmann::json json = {{"architectures", {"LlamaForCausalLM"}},
                               {"model_type", "llama"},
                               {"vocab_size", vocab},
                               {"hidden_size", hidden},
                               {"intermediate_size", intermediate},
                               {"num_hidden_layers", layers},
                               {"num_attention_heads", heads},
                               {"num_key_value_heads", kv_heads},
                               {"max_position_embeddings", 131072},
                               {"rms_norm_eps", 1e-5},
                               {"rope_theta", 500000.0},
                               {"tie_word_embeddings", tied},
                               {"torch_dtype", "bfloat16"}};
  return parse_model_config(json, "test shape");
}
inline ModelConfig llama_8b() {
  return llama_shape(128256, 4096, 14336, 32, 32, 8, false);
}
inline ModelConfig llama_1b() {
  return llama_shape(128256, 2048, 8192, 16, 32, 8, true);
}
// Small enough to reason about unit by unit: 4 layers of 8 MiB-ish units.
inline ModelConfig toy_shape() {
  return llama_shape(4096, 512, 1536, 4, 8, 4, false);
}

// A profile with round numbers: `layer_s` seconds per layer forward for the whole step's tokens
// (backward twice that), no fixed costs or latency, PCIe `pcie` bytes/s each way (also in duplex),
// CPU AdamW `cpu` params/s, GPU AdamW `gpu_adamw` params/s; gradient norms on the GPU take no time.
inline MachineProfile round_profile(const ModelConfig& config, int64_t seq_len, int64_t step_tokens,
                                    double layer_s, double pcie, double cpu, double gpu_adamw = 0.0) {
  MachineProfile p;
  p.device_name = "synthetic";
  p.device_memory_bytes = 80e9;
  p.seq_len = seq_len;
  p.shape_key = model_shape_key(config, seq_len, DType::BF16);
  const double per_token = layer_s / static_cast<double>(step_tokens);
  p.compute.embedding_forward = {0.0, per_token / 100};
  p.compute.embedding_backward = {0.0, per_token / 100};
  p.compute.layer_forward = {0.0, per_token};
  p.compute.layer_backward = {0.0, 2 * per_token};
  p.compute.head = {0.0, 2 * per_token};
  p.compute.head_f32_grads = p.compute.head;
  p.compute.head_grouped = p.compute.head;
  p.compute.head_f32_grads_grouped = p.compute.head;
  p.compute.gpu_adamw_params_per_s = gpu_adamw;
  p.compute.grad_norm_params_per_s = 1e30;
  p.transfer = {pcie, pcie, pcie, pcie, 0.0};
  p.host.threads = 16;
  p.host.cpu_adamw_params_per_s = cpu;
  p.host.memory_bytes = 512e9;
  return p;
}

}  // namespace ferry::test
