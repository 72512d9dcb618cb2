#include "planner/sequence_tile.h"

namespace ferry {

int64_t tile_count(int64_t chunk_tokens, int64_t seq_tile) {
  if (seq_tile <= 0 || seq_tile >= chunk_tokens) return 1;
  return (chunk_tokens + seq_tile - 1) / seq_tile;
}

double tiled_seconds(const LinearTime& t, int64_t chunk_tokens, int64_t seq_tile) {
  const int64_t tiles = tile_count(chunk_tokens, seq_tile);
  if (tiles == 1) return t.at(chunk_tokens);
  return static_cast<double>(tiles) * t.fixed_s +
         t.per_token_s * static_cast<double>(chunk_tokens + tiles * kTileTailTokens);
}

double tiled_backward_extra_share(const ModelConfig& c, int64_t chunk_tokens, int64_t seq_tile) {
  if (!c.qk_norm || tile_count(chunk_tokens, seq_tile) == 1) return 0.0;
  const double H = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double Q = static_cast<double>(c.q_dim()), K = static_cast<double>(c.kv_dim());
  return H * (Q + K) / (H * (2.0 * Q + 2.0 * K) + 3.0 * H * F);
}

std::vector<int64_t> seq_tile_candidates(int64_t seq_len, int64_t chunk_tokens) {
  std::vector<int64_t> out = {0};
  if (seq_len <= kTiledFromSeqLen) return out;
  for (int64_t tile = 1024; tile <= 16384 && tile < chunk_tokens; tile *= 2) out.push_back(tile);
  return out;
}

}  // namespace ferry
