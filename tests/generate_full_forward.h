// The reference the generation tests hold the KV-cache path to: one full forward over a whole
// sequence with the training code's layer (model/decoder_layer.h), on the CPU ops.
#pragma once

#include <numeric>
#include <vector>

#include "core/arena.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_weights.h"
#include "ops/ops.h"

namespace ferry::test {

// Logits (T, V) of `ids` as one sequence at positions 0..T-1.
inline std::vector<float> full_forward_logits(const ModelWeights& w, const std::vector<int32_t>& ids) {
  const ModelConfig& c = w.config;
  const int64_t T = static_cast<int64_t>(ids.size()), H = c.hidden_size;
  auto ops = make_cpu_ops();
  std::vector<int32_t> positions(ids.size()), doc_start(ids.size(), 0);
  std::iota(positions.begin(), positions.end(), 0);
  TokenChunk chunk;
  chunk.tokens = T;
  chunk.ids = ids.data();
  chunk.positions = positions.data();
  chunk.doc_start = doc_start.data();
  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, c, T, DType::F32, false);
  carve_head_scratch(measure, c, T, DType::F32);
  std::vector<char> memory(measure.used() + Arena::kAlignment);
  Arena arena(memory.data(), memory.size());
  LayerScratch ls = carve_layer_scratch(arena, c, T, DType::F32, false);
  HeadScratch hs = carve_head_scratch(arena, c, T, DType::F32);
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const LayerContext ctx{&c, inv_freq.data()};
  std::vector<float> a(static_cast<size_t>(T * H)), b(a.size());
  auto* units = const_cast<std::vector<std::vector<float>>*>(&w.units);
  ops->embedding_forward(ids.data(), embedding_table(w.layout, (*units)[0].data(), DType::F32),
                         Tensor::f32(a.data(), {T, H}));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const size_t u = w.layout.layer_unit(l);
    layer_forward(*ops, ctx, layer_params(w.layout.units[u], (*units)[u].data(), DType::F32), chunk,
                  Tensor::f32(a.data(), {T, H}), Tensor::f32(b.data(), {T, H}), ls);
    std::swap(a, b);
  }
  std::vector<float> logits(static_cast<size_t>(T * c.vocab_size));
  head_logits(*ops, c,
              head_params(w.layout, (*units)[w.layout.head_unit()].data(), (*units)[0].data(), DType::F32),
              Tensor::f32(a.data(), {T, H}), Tensor::f32(logits.data(), {T, c.vocab_size}), hs);
  return logits;
}

}  // namespace ferry::test
