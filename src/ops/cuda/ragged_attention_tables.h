// The device tables that let cuDNN's attention take a micro-chunk's segments (ops.h:
// AttentionMask::segment_bounds) as a ragged batch (cudnn_attention_graphs.h): each entry's length
// and where it starts in q, k and v, and out, and the copy of the statistics between ferry's lse
// and cuDNN's packed per-entry layout. Plain C++ (no cuDNN types), so that a build without cuDNN's
// headers compiles it too.
#pragma once

#include <cstdint>

namespace ferry {

// From bounds (segments + 1 token indices in device memory, the first 0, the last T): for each of
// `batch` >= segments entries its length, seq_len[i] (int32), and the element offsets of its first
// token in rows of q_row, kv_row and o_row elements (int64, batch + 1 each). Entries from
// `segments` on are empty: length 0, every offset at the end of the tokens. Enqueued on `stream`.
void fill_ragged_attention_tables(const int32_t* bounds, int64_t segments, int64_t batch, int64_t q_row,
                                  int64_t kv_row, int64_t o_row, int32_t* seq_len, int64_t* q_offset,
                                  int64_t* kv_offset, int64_t* o_offset, void* stream);

// Copies the statistics of the segments between lse (heads, tokens), ferry's layout, and packed
// (batch, heads, seq), cuDNN's: packed[i][h][s] is lse[h][bounds[i] + s] for s below segment i's
// length; the rest of packed is neither read nor written. to_packed chooses the direction.
void copy_ragged_statistics(const int32_t* bounds, int64_t segments, int heads, int64_t tokens, int64_t seq,
                            float* lse, float* packed, bool to_packed, void* stream);

}  // namespace ferry
