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

  int64_t chunks() const { return rows / micro_batch; }
  int64_t chunk_tokens() const { return micro_batch * seq_len; }
  TokenChunk chunk(int64_t c) const;
  // seq_len when chunk c's rows are plain causal sequences, else 0.
  int64_t row_tokens(int64_t c) const;
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
