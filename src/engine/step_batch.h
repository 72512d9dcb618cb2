// The rows of one optimizer step, flattened and cut into micro-chunks of `micro_batch` rows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/token_chunk.h"

namespace ferry {

struct PackedRow;

struct StepBatch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  int64_t micro_batch = 1;
  // rows * seq_len each. doc_start is relative to the start of the row's micro-chunk, so a chunk's
  // slice can be handed to the ops as it is.
  std::vector<int32_t> ids, targets, positions, doc_start;
  // Per chunk: every row of it attends as one causal sequence (attends_as_one_sequence), which
  // gives the chunk's TokenChunk::row_tokens.
  std::vector<uint8_t> chunk_rows_are_sequences;
  // Per chunk: its causal segments (attention_segments of its rows, in ops/ops.h's
  // AttentionMask::segment_bounds), laid out like doc_start: chunk c's n_c + 1 bounds, relative to
  // its first token and ending at chunk_tokens(), are the first entries of its chunk_tokens(), the
  // rest 0.
  // n_c is 0 where the bounds would not fit in the chunk's chunk_tokens() entries (every token a
  // segment of its own), and in a batch built by hand without them: attention uses doc_start.
  std::vector<int32_t> segment_bounds;
  std::vector<int64_t> chunk_segments, chunk_longest_segment;

  int64_t chunks() const { return rows / micro_batch; }
  int64_t chunk_tokens() const { return micro_batch * seq_len; }
  TokenChunk chunk(int64_t c) const;
  // seq_len when chunk c's rows are plain causal sequences, else 0.
  int64_t row_tokens(int64_t c) const;
  // Chunk c's segment count n_c and its longest segment's tokens (0, 0 without segments).
  int64_t segments(int64_t c) const;
  int64_t longest_segment(int64_t c) const;
  // Tokens whose target is counted by the loss, over the whole step.
  int64_t counted_tokens() const;
};

StepBatch make_step_batch(const std::vector<const PackedRow*>& rows, int64_t seq_len, int64_t micro_batch);

// Micro-chunks [first, first + count) of `batch` as a batch of their own: one device's share of a
// step run by several devices (engine/device_group_engine.h).
StepBatch chunk_slice(const StepBatch& batch, int64_t first, int64_t count);

// The distinct token ids among `ids`, sorted: the embedding rows a step's gradient touches.
// Throws ferry::Error for an id outside [0, vocab).
std::vector<int32_t> distinct_ids(std::span<const int32_t> ids, int64_t vocab);

}  // namespace ferry
