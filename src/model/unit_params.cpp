#include "model/unit_params.h"

namespace ferry {

namespace {

Tensor view_of(const UnitLayout& unit, void* base, DType dtype, std::string_view name) {
  const ParamSlot* p = unit.find(name);
  if (p == nullptr) return Tensor();
  Tensor t;
  t.data = static_cast<char*>(base) + static_cast<size_t>(p->offset) * dtype_size(dtype);
  t.dtype = dtype;
  t.ndim = static_cast<int>(p->shape.size());
  for (int i = 0; i < t.ndim; ++i) t.shape[i] = p->shape[i];
  return t;
}

}  // namespace

LayerParams layer_params(const UnitLayout& unit, void* base, DType dtype) {
  FERRY_ASSERT(unit.kind == UnitKind::Layer);
  auto v = [&](std::string_view name) { return view_of(unit, base, dtype, name); };
  LayerParams p;
  p.input_norm = v("input_layernorm.weight");
  p.q_proj = v("self_attn.q_proj.weight");
  p.q_bias = v("self_attn.q_proj.bias");
  p.k_proj = v("self_attn.k_proj.weight");
  p.k_bias = v("self_attn.k_proj.bias");
  p.v_proj = v("self_attn.v_proj.weight");
  p.v_bias = v("self_attn.v_proj.bias");
  p.o_proj = v("self_attn.o_proj.weight");
  p.o_bias = v("self_attn.o_proj.bias");
  p.q_norm = v("self_attn.q_norm.weight");
  p.k_norm = v("self_attn.k_norm.weight");
  p.post_norm = v("post_attention_layernorm.weight");
  p.gate_proj = v("mlp.gate_proj.weight");
  p.gate_bias = v("mlp.gate_proj.bias");
  p.up_proj = v("mlp.up_proj.weight");
  p.up_bias = v("mlp.up_proj.bias");
  p.down_proj = v("mlp.down_proj.weight");
  p.down_bias = v("mlp.down_proj.bias");
  return p;
}

HeadParams head_params(const ModelLayout& layout, void* head_base, void* embedding_base, DType dtype) {
  const UnitLayout& head = layout.units[layout.head_unit()];
  HeadParams p;
  p.norm = view_of(head, head_base, dtype, "model.norm.weight");
  p.lm_head = layout.tied ? embedding_table(layout, embedding_base, dtype)
                          : view_of(head, head_base, dtype, "lm_head.weight");
  return p;
}

Tensor embedding_table(const ModelLayout& layout, void* embedding_base, DType dtype) {
  return view_of(layout.units[layout.embedding_unit()], embedding_base, dtype, "embed_tokens.weight");
}

}  // namespace ferry
