#include "generate/cached_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "model/lm_head.h"

namespace ferry {

namespace {

// A view of `buffer`'s memory from element `offset` on.
Tensor view_at(const DeviceBuffer& buffer, DType dtype, int64_t offset, std::initializer_list<int64_t> dims) {
  return Tensor(static_cast<char*>(buffer.data()) + static_cast<size_t>(offset) * dtype_size(dtype), dtype,
                dims);
}

int64_t chunk_tokens(int64_t context) {
  return std::min(CachedDecoder::kChunkTokens, context);
}

}  // namespace

size_t CachedDecoder::device_bytes(const ModelConfig& c, DType dtype, int64_t context) {
  const size_t es = dtype_size(dtype);
  const auto C = static_cast<size_t>(chunk_tokens(context));
  const auto H = static_cast<size_t>(c.hidden_size), F = static_cast<size_t>(c.intermediate_size);
  const auto QD = static_cast<size_t>(c.q_dim()), KD = static_cast<size_t>(c.kv_dim());
  const auto V = static_cast<size_t>(c.vocab_size), R = static_cast<size_t>(kLogitRows);
  size_t bytes = 2 * static_cast<size_t>(c.num_layers) * static_cast<size_t>(context) * KD * es;
  bytes += static_cast<size_t>(context) * 8 + static_cast<size_t>(c.head_dim) * 2;
  bytes += C * (3 * H + 2 * QD + 3 * F + (c.qk_norm ? QD + KD : 0)) * es;
  bytes += C * static_cast<size_t>(std::max(c.num_heads, c.num_kv_heads)) * 4;
  bytes += R * (H + V) * es + (dtype == DType::F32 ? 0 : R * V * 4);
  return bytes;
}

CachedDecoder::CachedDecoder(const ResidentModel& model, Device& device, Ops& ops, int64_t context)
    : model_(model), device_(device), ops_(ops), context_(context), dtype_(model.dtype()) {
  const ModelConfig& c = model.config();
  FERRY_CHECK(context > 0 && context <= c.max_position_embeddings, "generate",
              "a context of {} tokens is invalid; the model takes 1 to {} (max_position_embeddings)", context,
              c.max_position_embeddings);
  const size_t es = dtype_size(dtype_);
  const auto C = static_cast<size_t>(chunk_tokens(context));
  const auto H = static_cast<size_t>(c.hidden_size), F = static_cast<size_t>(c.intermediate_size);
  const auto QD = static_cast<size_t>(c.q_dim()), KD = static_cast<size_t>(c.kv_dim());
  const auto V = static_cast<size_t>(c.vocab_size), R = static_cast<size_t>(kLogitRows);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    k_cache_.emplace_back(device, static_cast<size_t>(context) * KD * es, "KV cache");
    v_cache_.emplace_back(device, static_cast<size_t>(context) * KD * es, "KV cache");
  }
  ids_ = DeviceBuffer(device, static_cast<size_t>(context) * 4, "generation token ids");
  positions_ = DeviceBuffer(device, static_cast<size_t>(context) * 4, "generation positions");
  const std::vector<float> inv_freq = rope_inv_freq(c);
  inv_freq_ = DeviceBuffer(device, inv_freq.size() * 4, "RoPE frequencies");
  x_ = DeviceBuffer(device, C * H * es, "generation activations");
  x1_ = DeviceBuffer(device, C * H * es, "generation activations");
  h_ = DeviceBuffer(device, C * H * es, "generation activations");
  q_ = DeviceBuffer(device, C * QD * es, "generation activations");
  attn_ = DeviceBuffer(device, C * QD * es, "generation activations");
  if (c.qk_norm) {
    q_pre_ = DeviceBuffer(device, C * QD * es, "generation activations");
    k_pre_ = DeviceBuffer(device, C * KD * es, "generation activations");
  }
  gate_ = DeviceBuffer(device, C * F * es, "generation activations");
  up_ = DeviceBuffer(device, C * F * es, "generation activations");
  act_ = DeviceBuffer(device, C * F * es, "generation activations");
  rstd_ = DeviceBuffer(device, C * static_cast<size_t>(std::max(c.num_heads, c.num_kv_heads)) * 4,
                       "norm statistics");
  normed_ = DeviceBuffer(device, R * H * es, "generation head");
  logits_ = DeviceBuffer(device, R * V * es, "generation logits");
  if (dtype_ != DType::F32) logits_f32_ = DeviceBuffer(device, R * V * 4, "generation logits");
  host_ids_ = PinnedBuffer(device, C * 4, "generation token ids");
  host_logits_ = PinnedBuffer(device, R * V * 4, "generation logits");

  std::vector<int32_t> positions(static_cast<size_t>(context));
  std::iota(positions.begin(), positions.end(), 0);
  device.copy_to_device(positions_.data(), positions.data(), positions.size() * 4, StreamKind::Compute);
  device.copy_to_device(inv_freq_.data(), inv_freq.data(), inv_freq.size() * 4, StreamKind::Compute);
  device.synchronize_all();
}

void CachedDecoder::truncate(int64_t n) {
  FERRY_ASSERT(n >= 0 && n <= length_);
  length_ = n;
}

void CachedDecoder::upload_ids(std::span<const int32_t> tokens) {
  const int64_t V = model_.config().vocab_size;
  for (int32_t id : tokens)
    FERRY_CHECK(
        id >= 0 && id < V, "generate",
        "token id {} is outside the model's vocabulary of {}; the tokenizer does not belong to this model",
        id, V);
  // The pinned staging is reused: the previous chunk's copy must have run.
  device_.synchronize(device_.record(StreamKind::Compute));
  std::memcpy(host_ids_.data(), tokens.data(), tokens.size() * 4);
  device_.copy_to_device(static_cast<int32_t*>(ids_.data()) + length_, host_ids_.data(), tokens.size() * 4,
                         StreamKind::Compute);
}

void CachedDecoder::forward_chunk(int64_t T) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size, F = c.intermediate_size, Hq = c.num_heads, Hkv = c.num_kv_heads,
                D = c.head_dim;
  const int64_t QD = c.q_dim(), KD = c.kv_dim(), past = length_, S = past + T;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = attention_scale(c);  // 1/sqrt(head_dim), with YaRN's temperature (model_config.h)
  const int32_t* positions = static_cast<const int32_t*>(positions_.data()) + past;
  const auto* inv_freq = static_cast<const float*>(inv_freq_.data());
  const DType dt = dtype_;

  Tensor x = view_at(x_, dt, 0, {T, H});
  Tensor x1 = view_at(x1_, dt, 0, {T, H});
  Tensor h = view_at(h_, dt, 0, {T, H});
  Tensor q = view_at(q_, dt, 0, {T, QD});
  Tensor attn = view_at(attn_, dt, 0, {T, Hq, D});
  Tensor gate = view_at(gate_, dt, 0, {T, F});
  Tensor up = view_at(up_, dt, 0, {T, F});
  Tensor act = view_at(act_, dt, 0, {T, F});
  Tensor rstd = view_at(rstd_, DType::F32, 0, {T});
  ops_.embedding_forward(static_cast<const int32_t*>(ids_.data()) + past, model_.embedding(), x);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerParams p = model_.layer(l);
    const size_t li = static_cast<size_t>(l);
    // This chunk's keys and values are written straight into their rows of the cache.
    Tensor k_new = view_at(k_cache_[li], dt, past * KD, {T, KD});
    Tensor v_new = view_at(v_cache_[li], dt, past * KD, {T, KD});
    ops_.rmsnorm_forward(x, p.input_norm, eps, h, rstd);
    if (c.qk_norm) {
      Tensor q_pre = view_at(q_pre_, dt, 0, {T, QD});
      Tensor k_pre = view_at(k_pre_, dt, 0, {T, KD});
      ops_.linear_forward(h, p.q_proj, p.q_bias, Tensor(), q_pre);
      ops_.linear_forward(h, p.k_proj, p.k_bias, Tensor(), k_pre);
      ops_.rmsnorm_forward(q_pre.view({T * Hq, D}), p.q_norm, eps, q.view({T * Hq, D}),
                           view_at(rstd_, DType::F32, 0, {T * Hq}));
      ops_.rmsnorm_forward(k_pre.view({T * Hkv, D}), p.k_norm, eps, k_new.view({T * Hkv, D}),
                           view_at(rstd_, DType::F32, 0, {T * Hkv}));
    } else {
      ops_.linear_forward(h, p.q_proj, p.q_bias, Tensor(), q);
      ops_.linear_forward(h, p.k_proj, p.k_bias, Tensor(), k_new);
    }
    ops_.linear_forward(h, p.v_proj, p.v_bias, Tensor(), v_new);
    ops_.rope(q.view({T, Hq, D}), positions, inv_freq, false);
    ops_.rope(k_new.view({T, Hkv, D}), positions, inv_freq, false);
    ops_.attention_cached(q.view({T, Hq, D}), view_at(k_cache_[li], dt, 0, {S, Hkv, D}),
                          view_at(v_cache_[li], dt, 0, {S, Hkv, D}), scale, attn);
    ops_.linear_forward(attn.view({T, QD}), p.o_proj, p.o_bias, x, x1);
    ops_.rmsnorm_forward(x1, p.post_norm, eps, h, rstd);
    ops_.linear_forward(h, p.gate_proj, p.gate_bias, Tensor(), gate);
    ops_.linear_forward(h, p.up_proj, p.up_bias, Tensor(), up);
    ops_.swiglu_forward(gate, up, act);
    ops_.linear_forward(act, p.down_proj, p.down_bias, x1, x);
  }
}

void CachedDecoder::head_rows(int64_t row, int64_t rows) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size, V = c.vocab_size;
  HeadScratch s;
  s.normed = view_at(normed_, dtype_, 0, {rows, H});
  s.rstd = view_at(rstd_, DType::F32, 0, {rows});
  Tensor logits = view_at(logits_, dtype_, 0, {rows, V});
  head_logits(ops_, c, model_.head(), view_at(x_, dtype_, row * H, {rows, H}), logits, s);
  const void* source = logits_.data();
  if (dtype_ != DType::F32) {
    ops_.copy(logits, view_at(logits_f32_, DType::F32, 0, {rows, V}));
    source = logits_f32_.data();
  }
  device_.copy_to_host(host_logits_.data(), source, static_cast<size_t>(rows * V) * 4, StreamKind::Compute);
  device_.synchronize(device_.record(StreamKind::Compute));
}

const std::vector<float>& CachedDecoder::feed(std::span<const int32_t> tokens) {
  FERRY_ASSERT(!tokens.empty());
  const int64_t n = static_cast<int64_t>(tokens.size());
  FERRY_CHECK(length_ + n <= context_, "generate",
              "{} tokens do not fit the context of {} tokens ({} already held); give a larger --context (at "
              "most max_position_embeddings, {})",
              length_ + n, context_, length_, model_.config().max_position_embeddings);
  const int64_t chunk = chunk_tokens(context_);
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t count = std::min(chunk, n - start);
    upload_ids(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(count)));
    forward_chunk(count);
    length_ += count;
    if (start + count == n) head_rows(count - 1, 1);
  }
  const auto* logits = static_cast<const float*>(host_logits_.data());
  last_logits_.assign(logits, logits + model_.config().vocab_size);
  return last_logits_;
}

std::vector<float> CachedDecoder::feed_all_logits(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), V = model_.config().vocab_size;
  FERRY_CHECK(length_ + n <= context_, "generate", "{} tokens do not fit the context of {} tokens",
              length_ + n, context_);
  std::vector<float> out;
  const int64_t chunk = chunk_tokens(context_);
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t count = std::min(chunk, n - start);
    upload_ids(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(count)));
    forward_chunk(count);
    length_ += count;
    for (int64_t row = 0; row < count; row += kLogitRows) {
      const int64_t rows = std::min(kLogitRows, count - row);
      head_rows(row, rows);
      const auto* logits = static_cast<const float*>(host_logits_.data());
      out.insert(out.end(), logits, logits + rows * V);
    }
  }
  return out;
}

}  // namespace ferry
