// The head unit: final RMSNorm, LM head and cross-entropy, forward and backward in one pass
// (the head is the last unit, so its backward follows its forward at once). Every pass is
// token-local, so it runs over sequence tiles of HeadScratch::tile_tokens tokens (decoder_layer.h):
// the vocabulary-wide logits are chunked inside linear_cross_entropy, and the norm's (T,H) input
// and gradient exist one tile at a time.
#pragma once

#include "core/arena.h"
#include "model/model_config.h"
#include "model/token_chunk.h"
#include "model/unit_params.h"
#include "ops/ops.h"

namespace ferry {

struct HeadScratch {
  int64_t tile_tokens = 0;  // rows of each tensor below (one tile); 0: as many as the chunk has
  Tensor normed;            // (tile,H)
  Tensor rstd;              // (tile)
  Tensor d_normed;          // (tile,H)
  // The logits chunks whose dlogits one product of the head's weight gradient takes
  // (Plan::head_weight_grad_chunks; Ops::linear_cross_entropy): held in the ops' working memory.
  int64_t weight_grad_chunks = 1;
};

// tile_tokens 0 or >= tokens: untiled.
HeadScratch carve_head_scratch(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                               int64_t tile_tokens = 0);

// loss_sum (F32, 1 element, in the ops' memory) += the summed cross-entropy over the chunk's
// counted targets. With `grads` given: dx (T,H) = grad_scale * d(sum)/dx and
// grads += grad_scale * d(sum)/d(norm, lm_head). `logits` (T,V), when given, receives the logits.
void head_forward_backward(Ops& ops, const ModelConfig& config, const HeadParams& params,
                           const HeadParams* grads, const TokenChunk& chunk, Tensor x, float grad_scale,
                           Tensor dx, HeadScratch& s, Tensor loss_sum, Tensor logits = Tensor());

// Logits only (evaluation and generation): logits (T,V) = lm_head(norm(x)).
void head_logits(Ops& ops, const ModelConfig& config, const HeadParams& params, Tensor x, Tensor logits,
                 HeadScratch& s);

}  // namespace ferry
