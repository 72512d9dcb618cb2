// Units and their flat parameter layouts (DESIGN.md §1).
//
// The model is a list of units: the embedding, decoder layers 0..L-1, and the head (final norm +
// LM head). Each unit's parameters live in one contiguous buffer; the layout table gives every
// parameter's Hugging Face name, shape and offset in that buffer. The same layout serves host
// masters, optimizer state, gradients and GPU slots, so one copy moves a whole unit.
//
// Offsets are aligned to kParamAlignment elements (256 bytes in fp32, 128 in bf16) so that vector
// loads on either side never straddle two parameters. The gaps are zero and stay zero: their
// gradient is zero and weight decay of zero is zero.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace ferry {

constexpr int64_t kParamAlignment = 64;

enum class UnitKind { Embedding, Layer, Head };

struct ParamSlot {
  std::string name;     // short name inside the unit, e.g. "self_attn.q_proj.weight"
  std::string hf_name;  // full Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the unit buffer
  int64_t numel = 0;
  bool decay = true;  // weight decay applies (false for norm weights and biases by default)
};

struct UnitLayout {
  UnitKind kind = UnitKind::Layer;
  int64_t layer = -1;  // decoder layer index for UnitKind::Layer
  std::string name;    // "embedding", "layer.3", "head"
  std::vector<ParamSlot> params;
  int64_t numel = 0;  // buffer length in elements, padding included

  // The slot with this short name; FERRY_ASSERTs that it exists.
  const ParamSlot& slot(std::string_view short_name) const;
  const ParamSlot* find(std::string_view short_name) const;
};

struct ModelLayout {
  std::vector<UnitLayout> units;  // [embedding, layer 0, ..., layer L-1, head]
  // With tied embeddings the head has no lm_head of its own: it reads (and accumulates the
  // gradient of) the embedding unit's "embed_tokens.weight".
  bool tied = false;

  size_t embedding_unit() const { return 0; }
  size_t layer_unit(int64_t layer) const { return static_cast<size_t>(layer + 1); }
  size_t head_unit() const { return units.size() - 1; }
  int64_t num_layers() const { return static_cast<int64_t>(units.size()) - 2; }
  // Parameters of the model (padding excluded).
  int64_t parameter_count() const;
};

ModelLayout build_model_layout(const ModelConfig& config);

}  // namespace ferry
