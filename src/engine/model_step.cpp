#include "engine/model_step.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

ModelStep::ModelStep(const ModelConfig& config, const ModelLayout& layout, Ops& ops, int64_t max_chunk_tokens,
                     int64_t max_chunks, int64_t seq_tile, int64_t head_groups)
    : config_(config),
      layout_(layout),
      ops_(ops),
      max_chunk_tokens_(max_chunk_tokens),
      max_chunks_(max_chunks),
      inv_freq_(rope_inv_freq(config)) {
  const size_t th = static_cast<size_t>(max_chunk_tokens * config.hidden_size);
  boundary_.assign(static_cast<size_t>(config.num_layers + 1) * static_cast<size_t>(max_chunks) * th, 0.0f);
  chunk_grads_.assign(static_cast<size_t>(max_chunks) * th, 0.0f);

  Arena measure = Arena::measuring();
  carve_layer_scratch(measure, config, max_chunk_tokens, DType::F32, true, seq_tile, head_groups);
  carve_head_scratch(measure, config, max_chunk_tokens, DType::F32, seq_tile);
  scratch_.assign(measure.used() / sizeof(float) + Arena::kAlignment, 0.0f);
  Arena arena(scratch_.data(), scratch_.size() * sizeof(float));
  layer_scratch_ =
      carve_layer_scratch(arena, config, max_chunk_tokens, DType::F32, true, seq_tile, head_groups);
  head_scratch_ = carve_head_scratch(arena, config, max_chunk_tokens, DType::F32, seq_tile);
}

StepLoss ModelStep::run(const std::vector<float*>& params, const std::vector<float*>& grads,
                        const StepBatch& batch, int64_t scale_tokens) {
  FERRY_ASSERT(params.size() == layout_.units.size() && grads.size() == layout_.units.size());
  const int64_t T = batch.chunk_tokens(), H = config_.hidden_size, C = batch.chunks(), L = config_.num_layers;
  FERRY_ASSERT(T <= max_chunk_tokens_ && C <= max_chunks_, "step larger than the executor was sized for");
  for (size_t u = 0; u < layout_.units.size(); ++u)
    std::fill(grads[u], grads[u] + layout_.units[u].numel, 0.0f);

  const size_t th = static_cast<size_t>(T * H);
  auto boundary = [&](int64_t layer, int64_t c) {
    return Tensor::f32(
        boundary_.data() +
            (static_cast<size_t>(layer) * static_cast<size_t>(C) + static_cast<size_t>(c)) * th,
        {T, H});
  };
  auto chunk_grad = [&](int64_t c) {
    return Tensor::f32(chunk_grads_.data() + static_cast<size_t>(c) * th, {T, H});
  };
  const LayerContext ctx = context();
  const size_t emb = layout_.embedding_unit(), head = layout_.head_unit();

  // Forward, layer-major.
  Tensor table = embedding_table(layout_, params[emb], DType::F32);
  for (int64_t c = 0; c < C; ++c) ops_.embedding_forward(batch.chunk(c).ids, table, boundary(0, c));
  for (int64_t l = 0; l < L; ++l) {
    const size_t u = layout_.layer_unit(l);
    const LayerParams p = layer_params(layout_.units[u], params[u], DType::F32);
    for (int64_t c = 0; c < C; ++c)
      layer_forward(ops_, ctx, p, batch.chunk(c), boundary(l, c), boundary(l + 1, c), layer_scratch_);
  }

  // Head: loss and its gradient, scaled by 1 / (counted tokens of the whole step).
  StepLoss result;
  result.counted_tokens = batch.counted_tokens();
  const int64_t scale_by = scale_tokens > 0 ? scale_tokens : result.counted_tokens;
  const float grad_scale = scale_by > 0 ? 1.0f / static_cast<float>(scale_by) : 0.0f;
  const HeadParams hp = head_params(layout_, params[head], params[emb], DType::F32);
  const HeadParams hg = head_params(layout_, grads[head], grads[emb], DType::F32);
  float loss_sum = 0.0f;
  for (int64_t c = 0; c < C; ++c)
    head_forward_backward(ops_, config_, hp, &hg, batch.chunk(c), boundary(L, c), grad_scale, chunk_grad(c),
                          head_scratch_, Tensor::f32(&loss_sum, {1}));
  result.loss_sum = loss_sum;

  // Backward, layer-major, last layer first; each layer recomputes its forward from its input.
  for (int64_t l = L - 1; l >= 0; --l) {
    const size_t u = layout_.layer_unit(l);
    const LayerParams p = layer_params(layout_.units[u], params[u], DType::F32);
    const LayerParams g = layer_params(layout_.units[u], grads[u], DType::F32);
    for (int64_t c = 0; c < C; ++c)
      layer_backward(ops_, ctx, p, g, batch.chunk(c), boundary(l, c), chunk_grad(c), chunk_grad(c),
                     layer_scratch_);
  }
  Tensor dtable = embedding_table(layout_, grads[emb], DType::F32);
  for (int64_t c = 0; c < C; ++c) ops_.embedding_backward(batch.chunk(c).ids, chunk_grad(c), dtable);
  return result;
}

StepLoss ModelStep::evaluate(const std::vector<float*>& params, const StepBatch& batch, float* logits_out) {
  const int64_t T = batch.chunk_tokens(), V = config_.vocab_size;
  const size_t emb = layout_.embedding_unit();
  const HeadParams hp = head_params(layout_, params[layout_.head_unit()], params[emb], DType::F32);
  StepLoss result;
  result.counted_tokens = batch.counted_tokens();
  float loss_sum = 0.0f;
  for (int64_t c = 0; c < batch.chunks(); ++c) {
    const TokenChunk chunk = batch.chunk(c);
    const Tensor x = forward_to_head(params, chunk);
    Tensor logits = logits_out ? Tensor::f32(logits_out + static_cast<size_t>(c * T * V), {T, V}) : Tensor();
    head_forward_backward(ops_, config_, hp, nullptr, chunk, x, 0.0f, Tensor(), head_scratch_,
                          Tensor::f32(&loss_sum, {1}), logits);
  }
  result.loss_sum = loss_sum;
  return result;
}

Tensor ModelStep::forward_to_head(const std::vector<float*>& params, const TokenChunk& chunk) {
  const int64_t T = chunk.tokens, H = config_.hidden_size;
  FERRY_ASSERT(T <= max_chunk_tokens_);
  Tensor x = Tensor::f32(boundary_.data(), {T, H});
  Tensor y = Tensor::f32(boundary_.data() + static_cast<size_t>(max_chunk_tokens_ * H), {T, H});
  ops_.embedding_forward(chunk.ids, embedding_table(layout_, params[layout_.embedding_unit()], DType::F32),
                         x);
  const LayerContext ctx = context();
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const size_t u = layout_.layer_unit(l);
    layer_forward(ops_, ctx, layer_params(layout_.units[u], params[u], DType::F32), chunk, x, y,
                  layer_scratch_);
    std::swap(x, y);
  }
  return x;
}

void ModelStep::logits(const std::vector<float*>& params, const TokenChunk& chunk, float* logits_out) {
  const Tensor x = forward_to_head(params, chunk);
  const size_t emb = layout_.embedding_unit();
  const HeadParams hp = head_params(layout_, params[layout_.head_unit()], params[emb], DType::F32);
  head_logits(ops_, config_, hp, x, Tensor::f32(logits_out, {chunk.tokens, config_.vocab_size}),
              head_scratch_);
}

}  // namespace ferry
