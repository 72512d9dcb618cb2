// Loss and gradients of one optimizer step over host memory, layer-major (DESIGN.md §1):
// every micro-chunk passes through layer i before any passes through layer i+1; only layer
// inputs are kept, and the backward recomputes each layer from its input.
//
// This is the plain in-memory executor. Every offloading schedule must reproduce its losses and
// gradients bit for bit on the CPU backend.
#pragma once

#include <vector>

#include "engine/step_batch.h"
#include "model/decoder_layer.h"
#include "model/lm_head.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "ops/ops.h"

namespace ferry {

struct StepLoss {
  double loss_sum = 0.0;  // summed cross-entropy over counted tokens
  int64_t counted_tokens = 0;
  double mean() const { return counted_tokens > 0 ? loss_sum / static_cast<double>(counted_tokens) : 0.0; }
};

class ModelStep {
 public:
  // Sized for micro-chunks of up to `max_chunk_tokens` tokens and steps of up to `max_chunks`
  // chunks, the layers and the head run over sequence tiles of `seq_tile` tokens (0: untiled;
  // decoder_layer.h), attention over `head_groups` groups of KV heads in turn. All memory is
  // allocated here, once.
  ModelStep(const ModelConfig& config, const ModelLayout& layout, Ops& ops, int64_t max_chunk_tokens,
            int64_t max_chunks, int64_t seq_tile = 0, int64_t head_groups = 1);

  // Zeroes `grads`, then computes the step: loss and grads of (summed loss / counted tokens).
  // params and grads hold one fp32 buffer per unit, laid out by the layout. `scale_tokens` > 0
  // divides by that many tokens instead: a part of a step split over several devices, scaled by
  // the whole step's counted tokens (the reference of engine/device_group_engine.h's tests).
  StepLoss run(const std::vector<float*>& params, const std::vector<float*>& grads, const StepBatch& batch,
               int64_t scale_tokens = 0);

  // Forward only, chunk by chunk: the summed loss of the batch. When logits_out is given it
  // receives (rows, seq_len, V) logits.
  StepLoss evaluate(const std::vector<float*>& params, const StepBatch& batch, float* logits_out = nullptr);

  // Forward only, for evaluation: logits (T,V) of one chunk (T <= max_chunk_tokens).
  void logits(const std::vector<float*>& params, const TokenChunk& chunk, float* logits_out);

 private:
  LayerContext context() const { return LayerContext{&config_, inv_freq_.data()}; }
  // Forward of one chunk through the embedding and every layer, chunk-major (evaluation);
  // returns the head's input, (T,H), in the first two boundary buffers.
  Tensor forward_to_head(const std::vector<float*>& params, const TokenChunk& chunk);

  ModelConfig config_;
  ModelLayout layout_;
  Ops& ops_;
  int64_t max_chunk_tokens_;
  int64_t max_chunks_;
  std::vector<float> inv_freq_;
  std::vector<float> boundary_;     // (L+1, chunks, T, H) layer inputs (index L: the head's input)
  std::vector<float> chunk_grads_;  // (chunks, T, H): d loss / d (current layer's output), per chunk
  std::vector<float> scratch_;
  LayerScratch layer_scratch_;
  HeadScratch head_scratch_;
};

}  // namespace ferry
