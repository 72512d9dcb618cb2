// Sequence tiles in the planner (model/decoder_layer.h): which tile sizes the search tries, and
// what a tile costs beside the untiled layer.
//
// Memory needs no function here: the memory model carves the layer scratch for the plan's tile
// (memory_model.cpp), so the token-local tensors count (seq_tile, width) and the attention's
// (chunk_tokens, width), exactly as the engine allocates them.
//
// Time: a tile repeats the layer's token-local kernel launches (all but the attention's), and a
// GEMM of fewer rows runs below the large-GEMM rate (its last wave of thread blocks is partly
// idle). The profile times whole micro-chunks (LinearTime: launches + per token) and no GEMM
// rates per row count, so a tile is charged the chunk's fixed part again and its GEMMs
// kTileTailTokens more tokens of work: at 4,096-token tiles 3% (an H200's 132 SMs run a 4096 x
// 14336 GEMM in ~10 waves of 128 x 256 tiles; the tail wave's idle share is of that order).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "planner/profile.h"

namespace ferry {

// Extra tokens of GEMM work charged per tile.
inline constexpr int64_t kTileTailTokens = 128;

// Tiles of a micro-chunk of `chunk_tokens` tokens with tiles of `seq_tile` (0: one).
int64_t tile_count(int64_t chunk_tokens, int64_t seq_tile);

// Seconds of one micro-chunk's layer (or head) pass run over tiles: `t` measured untiled.
double tiled_seconds(const LinearTime& t, int64_t chunk_tokens, int64_t seq_tile);

// Of a layer forward's time, the share a tiled backward runs again besides the recompute: with
// more than one tile the q/k projections of qk_norm models (their inputs to the q/k norms' backward
// are not kept: decoder_layer.h), as their share of the layer's weight-matrix FLOPs; 0 otherwise.
// Qwen3-8B: 4096 x (4096 + 1024) of 4096 x (2 x 4096 + 2 x 1024) + 3 x 4096 x 12288, 11%.
// (The input norm it also runs again is a memory-bound pass, taken as free.)
double tiled_backward_extra_share(const ModelConfig& config, int64_t chunk_tokens, int64_t seq_tile);

// The tiles the search tries for sequences of `seq_len` in chunks of `chunk_tokens`: untiled (0),
// and for sequences longer than kTiledFromSeqLen powers of two from 1,024 to 16,384 tokens that
// are shorter than the chunk. Up to 8K-token sequences the micro-batch already sizes the (T,F)
// intermediates (one 8K sequence of an 8B model: 224 MiB each), and tiles would only trade a few
// percent of compute for memory the search has other uses for.
inline constexpr int64_t kTiledFromSeqLen = 8192;
std::vector<int64_t> seq_tile_candidates(int64_t seq_len, int64_t chunk_tokens);

}  // namespace ferry
