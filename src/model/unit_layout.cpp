#include "model/unit_layout.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ferry {

const ParamSlot* UnitLayout::find(std::string_view short_name) const {
  for (const auto& p : params)
    if (p.name == short_name) return &p;
  return nullptr;
}

const ParamSlot& UnitLayout::slot(std::string_view short_name) const {
  const ParamSlot* p = find(short_name);
  FERRY_ASSERT(p != nullptr, "unit has no such parameter");
  return *p;
}

int64_t ModelLayout::parameter_count() const {
  int64_t n = 0;
  for (const auto& u : units)
    for (const auto& p : u.params) n += p.numel;
  return n;
}

namespace {

class UnitBuilder {
 public:
  UnitBuilder(UnitKind kind, int64_t layer, std::string name, std::string hf_prefix)
      : prefix_(std::move(hf_prefix)) {
    unit_.kind = kind;
    unit_.layer = layer;
    unit_.name = std::move(name);
  }
  void add(const std::string& short_name, std::vector<int64_t> shape, bool decay) {
    ParamSlot p;
    p.name = short_name;
    p.hf_name = prefix_ + short_name;
    p.numel = 1;
    for (int64_t d : shape) p.numel *= d;
    p.shape = std::move(shape);
    p.offset = unit_.numel;
    p.decay = decay;
    unit_.numel += (p.numel + kParamAlignment - 1) / kParamAlignment * kParamAlignment;
    unit_.params.push_back(std::move(p));
  }
  UnitLayout take() { return std::move(unit_); }

 private:
  std::string prefix_;
  UnitLayout unit_;
};

}  // namespace

ModelLayout build_model_layout(const ModelConfig& c) {
  ModelLayout layout;
  layout.tied = c.tie_word_embeddings;
  const int64_t H = c.hidden_size, F = c.intermediate_size, D = c.head_dim;

  UnitBuilder embedding(UnitKind::Embedding, -1, "embedding", "model.");
  embedding.add("embed_tokens.weight", {c.vocab_size, H}, true);
  layout.units.push_back(embedding.take());

  for (int64_t i = 0; i < c.num_layers; ++i) {
    UnitBuilder layer(UnitKind::Layer, i, fmt::format("layer.{}", i), fmt::format("model.layers.{}.", i));
    layer.add("input_layernorm.weight", {H}, false);
    layer.add("self_attn.q_proj.weight", {c.q_dim(), H}, true);
    if (c.qkv_bias) layer.add("self_attn.q_proj.bias", {c.q_dim()}, false);
    layer.add("self_attn.k_proj.weight", {c.kv_dim(), H}, true);
    if (c.qkv_bias) layer.add("self_attn.k_proj.bias", {c.kv_dim()}, false);
    layer.add("self_attn.v_proj.weight", {c.kv_dim(), H}, true);
    if (c.qkv_bias) layer.add("self_attn.v_proj.bias", {c.kv_dim()}, false);
    layer.add("self_attn.o_proj.weight", {H, c.q_dim()}, true);
    if (c.o_bias) layer.add("self_attn.o_proj.bias", {H}, false);
    if (c.qk_norm) {
      layer.add("self_attn.q_norm.weight", {D}, false);
      layer.add("self_attn.k_norm.weight", {D}, false);
    }
    layer.add("post_attention_layernorm.weight", {H}, false);
    layer.add("mlp.gate_proj.weight", {F, H}, true);
    if (c.mlp_bias) layer.add("mlp.gate_proj.bias", {F}, false);
    layer.add("mlp.up_proj.weight", {F, H}, true);
    if (c.mlp_bias) layer.add("mlp.up_proj.bias", {F}, false);
    layer.add("mlp.down_proj.weight", {H, F}, true);
    if (c.mlp_bias) layer.add("mlp.down_proj.bias", {H}, false);
    layout.units.push_back(layer.take());
  }

  // The head's names carry their own prefixes ("model.norm.weight", "lm_head.weight").
  UnitBuilder head(UnitKind::Head, -1, "head", "");
  head.add("model.norm.weight", {H}, false);
  if (!c.tie_word_embeddings) head.add("lm_head.weight", {c.vocab_size, H}, true);
  layout.units.push_back(head.take());
  return layout;
}

}  // namespace ferry
