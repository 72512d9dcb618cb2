// A micro-chunk of tokens: whole sequences (rows) of a step, flattened to T tokens.
#pragma once

#include <cstdint>

namespace ferry {

// All pointers address T int32 values in the memory the ops run on.
struct TokenChunk {
  int64_t tokens = 0;
  const int32_t* ids = nullptr;        // input token ids
  const int32_t* targets = nullptr;    // shifted labels; kIgnoreIndex where nothing is predicted
  const int32_t* positions = nullptr;  // RoPE positions, restarting at each document
  const int32_t* doc_start = nullptr;  // index of the first token of each token's document
  // R > 0 when the chunk is rows of R tokens that attention may treat as plain causal sequences
  // (AttentionMask::row_tokens in ops/ops.h; data/packing.h's attends_as_one_sequence), else 0.
  int64_t row_tokens = 0;
  // n > 0 when the chunk's tokens fall into n causal segments (AttentionMask::segment_bounds in
  // ops/ops.h; data/packing.h's attention_segments): n + 1 bounds, and the longest segment's tokens.
  const int32_t* segment_bounds = nullptr;
  int64_t segments = 0;
  int64_t longest_segment = 0;
};

}  // namespace ferry
