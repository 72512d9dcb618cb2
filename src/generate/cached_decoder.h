// The model's forward for generation, one sequence at a time, with a key/value cache: the prompt
// is run once (prefill), then each new token alone (decode), its queries attending to every cached
// key (Ops::attention_cached). Tokens may be fed in any grouping; the logits are those of a full
// forward over the whole sequence.
//
// The cache can also be cut back (truncate): a chat turn re-renders the conversation and feeds
// only what differs from the tokens already cached.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "device/device.h"
#include "generate/resident_model.h"
#include "ops/ops.h"

namespace ferry {

class CachedDecoder {
 public:
  // Memory for `context` tokens of cache (at most the model's max_position_embeddings) and the
  // working buffers of a prefill chunk, allocated here, once.
  CachedDecoder(const ResidentModel& model, Device& device, Ops& ops, int64_t context);

  // Feeds `tokens` after the cached ones and returns the logits (V, fp32, host) of the last of them.
  // Errors when the cache would pass its context.
  const std::vector<float>& feed(std::span<const int32_t> tokens);
  // As feed, but returns the logits of every fed token: (tokens.size(), V) fp32, host (tests).
  std::vector<float> feed_all_logits(std::span<const int32_t> tokens);

  // Tokens in the cache.
  int64_t length() const { return length_; }
  int64_t context() const { return context_; }
  // The longest context the model takes (max_position_embeddings).
  int64_t max_context() const { return model_.config().max_position_embeddings; }
  // Forgets every cached token after the first n.
  void truncate(int64_t n);

  // Tokens run through the layers at once: a longer prompt is fed in chunks of this size.
  static constexpr int64_t kChunkTokens = 256;
  // Logit rows made at once by feed_all_logits.
  static constexpr int64_t kLogitRows = 16;

  // Device bytes of a decoder for `context` tokens besides the weights (cache and buffers).
  static size_t device_bytes(const ModelConfig& config, DType dtype, int64_t context);

 private:
  // Runs tokens [length_, length_ + count) (ids already on the device) through the layers into x_.
  void forward_chunk(int64_t count);
  // Logits of rows [row, row + rows) of x_ into host_logits_.
  void head_rows(int64_t row, int64_t rows);
  void upload_ids(std::span<const int32_t> tokens);

  const ResidentModel& model_;
  Device& device_;
  Ops& ops_;
  int64_t context_;
  int64_t length_ = 0;
  DType dtype_;
  std::vector<DeviceBuffer> k_cache_, v_cache_;  // per layer (context, Hkv*D)
  DeviceBuffer ids_, positions_, inv_freq_;      // (context) int32, (context) int32, (D/2) fp32
  DeviceBuffer x_, x1_, h_, q_, k_pre_, q_pre_, attn_, gate_, up_, act_, rstd_;  // chunk buffers
  DeviceBuffer normed_, logits_, logits_f32_;
  PinnedBuffer host_ids_, host_logits_;
  std::vector<float> last_logits_;
};

}  // namespace ferry
