#include "engine/step_batch.h"

#include <algorithm>

#include "core/error.h"
#include "data/packing.h"
#include "ops/ops.h"

namespace ferry {

namespace {

// Chunk c's segments from their starts within it: the chunk's end closes the last, and a chunk
// whose n + 1 bounds would not fit its T entries keeps none (attention then uses doc_start).
void set_chunk_segments(StepBatch& b, int64_t c, std::vector<int32_t>& bounds) {
  const int64_t T = b.chunk_tokens();
  bounds.push_back(static_cast<int32_t>(T));
  const auto n = static_cast<int64_t>(bounds.size()) - 1;
  if (n + 1 > T) return;
  int32_t longest = 0;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) longest = std::max(longest, bounds[i + 1] - bounds[i]);
  std::copy(bounds.begin(), bounds.end(), b.segment_bounds.begin() + static_cast<ptrdiff_t>(c * T));
  b.chunk_segments[static_cast<size_t>(c)] = n;
  b.chunk_longest_segment[static_cast<size_t>(c)] = longest;
}

}  // namespace

TokenChunk StepBatch::chunk(int64_t c) const {
  FERRY_ASSERT(c >= 0 && c < chunks());
  const size_t begin = static_cast<size_t>(c * chunk_tokens());
  TokenChunk t;
  t.tokens = chunk_tokens();
  t.ids = ids.data() + begin;
  t.targets = targets.data() + begin;
  t.positions = positions.data() + begin;
  t.doc_start = doc_start.data() + begin;
  t.row_tokens = row_tokens(c);
  t.segments = segments(c);
  if (t.segments > 0) {
    t.segment_bounds = segment_bounds.data() + begin;
    t.longest_segment = longest_segment(c);
  }
  return t;
}

int64_t StepBatch::row_tokens(int64_t c) const {
  const auto i = static_cast<size_t>(c);
  return i < chunk_rows_are_sequences.size() && chunk_rows_are_sequences[i] ? seq_len : 0;
}

int64_t StepBatch::segments(int64_t c) const {
  const auto i = static_cast<size_t>(c);
  return i < chunk_segments.size() ? chunk_segments[i] : 0;
}

int64_t StepBatch::longest_segment(int64_t c) const {
  const auto i = static_cast<size_t>(c);
  return i < chunk_longest_segment.size() ? chunk_longest_segment[i] : 0;
}

int64_t StepBatch::counted_tokens() const {
  int64_t n = 0;
  for (int32_t t : targets) n += (t != kIgnoreIndex);
  return n;
}

StepBatch make_step_batch(const std::vector<const PackedRow*>& rows, int64_t seq_len, int64_t micro_batch) {
  FERRY_ASSERT(!rows.empty() && static_cast<int64_t>(rows.size()) % micro_batch == 0);
  StepBatch b;
  b.rows = static_cast<int64_t>(rows.size());
  b.seq_len = seq_len;
  b.micro_batch = micro_batch;
  const size_t total = static_cast<size_t>(b.rows * seq_len);
  b.ids.reserve(total);
  b.targets.reserve(total);
  b.positions.reserve(total);
  b.doc_start.reserve(total);
  b.chunk_rows_are_sequences.assign(static_cast<size_t>(b.chunks()), 1);
  b.segment_bounds.assign(total, 0);
  b.chunk_segments.assign(static_cast<size_t>(b.chunks()), 0);
  b.chunk_longest_segment.assign(static_cast<size_t>(b.chunks()), 0);
  std::vector<int32_t> bounds;  // the current chunk's, gathered row by row
  for (int64_t r = 0; r < b.rows; ++r) {
    const PackedRow& row = *rows[static_cast<size_t>(r)];
    if (!attends_as_one_sequence(row)) b.chunk_rows_are_sequences[static_cast<size_t>(r / micro_batch)] = 0;
    FERRY_ASSERT(static_cast<int64_t>(row.input_ids.size()) == seq_len);
    const int32_t row_offset = static_cast<int32_t>((r % micro_batch) * seq_len);
    b.ids.insert(b.ids.end(), row.input_ids.begin(), row.input_ids.end());
    b.targets.insert(b.targets.end(), row.targets.begin(), row.targets.end());
    b.positions.insert(b.positions.end(), row.positions.begin(), row.positions.end());
    for (int32_t s : row.doc_start) b.doc_start.push_back(row_offset + s);
    if (r % micro_batch == 0) bounds.clear();
    for (int32_t s : attention_segments(row)) bounds.push_back(row_offset + s);
    if ((r + 1) % micro_batch == 0) set_chunk_segments(b, r / micro_batch, bounds);
  }
  return b;
}

std::vector<int32_t> distinct_ids(std::span<const int32_t> ids, int64_t vocab) {
  std::vector<uint8_t> seen(static_cast<size_t>(vocab), 0);
  for (const int32_t id : ids) {
    FERRY_CHECK(id >= 0 && id < vocab, "data",
                "token id {} is outside the model's vocabulary of {} ids; re-tokenize "
                "the data with the model's tokenizer",
                id, vocab);
    seen[static_cast<size_t>(id)] = 1;
  }
  std::vector<int32_t> rows;
  for (size_t r = 0; r < seen.size(); ++r)
    if (seen[r]) rows.push_back(static_cast<int32_t>(r));
  return rows;
}

StepBatch chunk_slice(const StepBatch& batch, int64_t first, int64_t count) {
  FERRY_ASSERT(first >= 0 && count >= 0 && first + count <= batch.chunks());
  StepBatch out;
  out.seq_len = batch.seq_len;
  out.micro_batch = batch.micro_batch;
  out.rows = count * batch.micro_batch;
  const auto begin = static_cast<ptrdiff_t>(first * batch.chunk_tokens()),
             end = static_cast<ptrdiff_t>((first + count) * batch.chunk_tokens());
  out.ids.assign(batch.ids.begin() + begin, batch.ids.begin() + end);
  out.targets.assign(batch.targets.begin() + begin, batch.targets.begin() + end);
  out.positions.assign(batch.positions.begin() + begin, batch.positions.begin() + end);
  out.doc_start.assign(batch.doc_start.begin() + begin, batch.doc_start.begin() + end);
  if (!batch.chunk_rows_are_sequences.empty())
    out.chunk_rows_are_sequences.assign(batch.chunk_rows_are_sequences.begin() + first,
                                        batch.chunk_rows_are_sequences.begin() + first + count);
  // Bounds are relative to their chunk's first token, so a chunk's slice keeps them as they are.
  if (!batch.chunk_segments.empty()) {
    out.segment_bounds.assign(batch.segment_bounds.begin() + begin, batch.segment_bounds.begin() + end);
    out.chunk_segments.assign(batch.chunk_segments.begin() + first,
                              batch.chunk_segments.begin() + first + count);
    out.chunk_longest_segment.assign(batch.chunk_longest_segment.begin() + first,
                                     batch.chunk_longest_segment.begin() + first + count);
  }
  return out;
}

}  // namespace ferry
