// Typed views of a unit's parameters (or gradients) inside its flat buffer.
#pragma once

#include "core/tensor.h"
#include "model/unit_layout.h"

namespace ferry {

// Views into a decoder layer's buffer. Absent parameters (biases, q/k norms) are empty views.
struct LayerParams {
  Tensor input_norm;            // (H)
  Tensor q_proj, q_bias;        // (Hq*D, H), (Hq*D)
  Tensor k_proj, k_bias;        // (Hkv*D, H), (Hkv*D)
  Tensor v_proj, v_bias;        // (Hkv*D, H), (Hkv*D)
  Tensor o_proj, o_bias;        // (H, Hq*D), (H)
  Tensor q_norm, k_norm;        // (D) each
  Tensor post_norm;             // (H)
  Tensor gate_proj, gate_bias;  // (F, H), (F)
  Tensor up_proj, up_bias;      // (F, H), (F)
  Tensor down_proj, down_bias;  // (H, F), (H)
};

// The head's final norm and LM head. With tied embeddings lm_head views the embedding buffer.
struct HeadParams {
  Tensor norm;     // (H)
  Tensor lm_head;  // (V, H)
};

// `base` is the unit's buffer of elements of `dtype` laid out by `unit`.
LayerParams layer_params(const UnitLayout& unit, void* base, DType dtype);
// `embedding_base` is needed only for a tied model (the embedding unit's buffer, same dtype).
HeadParams head_params(const ModelLayout& layout, void* head_base, void* embedding_base, DType dtype);
Tensor embedding_table(const ModelLayout& layout, void* embedding_base, DType dtype);

}  // namespace ferry
