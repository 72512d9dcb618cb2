// A step batch of packed random documents, for tests that compare ways of running the same step
// (sequence tiles, head groups) on rows where documents start and end mid-row.
#pragma once

#include <random>
#include <vector>

#include "core/ignore_index.h"
#include "data/packing.h"
#include "engine/step_batch.h"

namespace ferry::test {

// Packed random documents of 3..70 tokens in rows of seq_len, their first label ignored; the
// rows live in `storage`, which must outlive the batch.
inline StepBatch packed_batch(int64_t vocab, int64_t seq_len, int64_t rows, int64_t micro_batch,
                              uint64_t seed, std::vector<PackedRow>& storage) {
  std::mt19937_64 rng(seed);
  std::vector<Document> docs;
  for (int d = 0; d < 40; ++d) {
    Document doc;
    const int n = 3 + static_cast<int>(rng() % 68);
    for (int i = 0; i < n; ++i) {
      const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      doc.input_ids.push_back(id);
      doc.labels.push_back(i == 0 ? kIgnoreIndex : id);
    }
    docs.push_back(doc);
  }
  storage = pack_documents(docs, seq_len, true);
  std::vector<const PackedRow*> picked;
  for (int64_t r = 0; r < rows; ++r) picked.push_back(&storage[static_cast<size_t>(r) % storage.size()]);
  return make_step_batch(picked, seq_len, micro_batch);
}

}  // namespace ferry::test
