// ModelConfig: the shape and math of a decoder-only model, read from a Hugging Face config.json.
//
// Supported: LlamaForCausalLM (incl. rope_scaling type "llama3"), MistralForCausalLM,
// Qwen2ForCausalLM (q/k/v bias), Qwen3ForCausalLM (q/k RMSNorm, explicit head_dim).
// Anything that would change the math and is not implemented is an error, never ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry {

enum class Architecture { Llama, Mistral, Qwen2, Qwen3 };

struct RopeScaling {
  // Llama3: Llama 3.1's smooth division of long wavelengths. Yarn: YaRN (NTK-by-parts) frequencies
  // and an attention temperature, as transformers' _compute_yarn_parameters (Qwen2.5/Qwen3 long
  // context, DeepSeek).
  enum class Type { None, Llama3, Yarn };
  Type type = Type::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;
  double beta_fast = 32.0;        // yarn: rotations below which a frequency is interpolated
  double beta_slow = 1.0;         // yarn: rotations above which it is kept
  bool truncate = true;           // yarn: correction range rounded out to whole dimensions
  double attention_factor = 1.0;  // yarn: cos and sin are scaled by it (queries and keys alike)
};

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string architecture_name;  // "LlamaForCausalLM", ...
  std::string model_type;         // "llama", "mistral", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless given explicitly
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // q_proj, k_proj, v_proj have a bias (Qwen2; Llama with attention_bias)
  bool o_bias = false;    // o_proj has a bias (Llama with attention_bias)
  bool mlp_bias = false;  // gate/up/down have a bias (Llama with mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (Qwen3)
  std::optional<int64_t> sliding_window;  // attention window when the model uses one
  DType dtype = DType::F32;               // torch_dtype / dtype of the stored weights
  double initializer_range = 0.02;
  // The config.json as read, so that the output can repeat it and edit only what changed.
  nlohmann::json raw;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses config.json content. `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
// Reads DIR/config.json.
ModelConfig load_model_config(const std::filesystem::path& model_dir);
// The config.json for a model ferry creates (ferry init): the keys transformers writes for the
// architecture, with this config's values.
nlohmann::json model_config_to_json(const ModelConfig& config);

// RoPE inverse frequencies (head_dim/2 values) exactly as transformers computes them, including
// the llama3 frequency scaling.
// The softmax scale of attention: 1/sqrt(head_dim), times the square of YaRN's attention factor
// (transformers scales cos and sin by it, so every query-key product by its square).
float attention_scale(const ModelConfig& config);

std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace ferry
