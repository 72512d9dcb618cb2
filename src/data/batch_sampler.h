// The order in which packed rows are visited: a fresh shuffle every epoch, reproducible everywhere.
//
// Epoch e's order is a Fisher–Yates shuffle of 0..num_rows-1 driven by std::mt19937_64 seeded with
// seed + e (the engine is fully specified by the C++ standard, so its output is the same on every
// platform). Fisher–Yates and the bounded draw are written here rather than taken from std::shuffle /
// std::uniform_int_distribution, whose algorithms differ between standard libraries: for
// i = n-1 down to 1, swap order[i] with order[j], j uniform in [0, i] by rejection sampling (draws
// below 2^64 mod (i+1) are rejected, then j = draw mod (i+1)). Changing any of this changes every
// resumed run's data order: the golden in tests/data_batch_sampler_test.cpp guards it.
//
// The position — epoch and index within the epoch's order — is all a checkpoint needs to resume
// exactly where the run stopped.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace ferry {

struct DataPosition {
  int64_t epoch = 0;  // 0-based
  int64_t index = 0;  // rows of this epoch's order already consumed, in [0, num_rows)
  bool operator==(const DataPosition&) const = default;
};

// {"epoch": 3, "index": 17}
void to_json(nlohmann::json& out, const DataPosition& position);
// Throws ferry::Error when a key is missing or not a non-negative integer.
void from_json(const nlohmann::json& in, DataPosition& position);

// Throws ferry::Error when a step of `global_batch` rows is more than the `num_rows` rows of the
// data: every step would then hold some rows several times (a global_batch of 10^6 on 10 rows
// planned and allocated a step of 10^6 sequences before failing for memory), and `epochs` would
// count no whole passes. A step may still hold a row twice where it spans the end of one epoch
// and the start of the next, as an epoch is a fresh order of every row. Call it once the rows are
// packed, before anything is sized by global_batch; next_rows checks it too.
void check_global_batch(int64_t global_batch, int64_t num_rows);

class BatchSampler {
 public:
  // shuffle = false visits rows in order every epoch. Throws ferry::Error when num_rows < 1.
  BatchSampler(int64_t num_rows, uint64_t seed, bool shuffle = true);

  // The next `count` row indices, continuing into the next epoch (reshuffled) when this one ends.
  // Throws ferry::Error when count > num_rows (check_global_batch).
  std::vector<int64_t> next_rows(int64_t count);

  // Where the next call to next_rows starts; index is always < num_rows (a finished epoch reads as
  // the start of the next one).
  DataPosition position() const { return position_; }
  // Continues from `position` (as saved by position()). Throws ferry::Error when it does not fit
  // this dataset (index > num_rows: a checkpoint made with other data or another seq_len).
  void seek(const DataPosition& position);

  int64_t num_rows() const { return num_rows_; }
  // The row order of an epoch, as this sampler visits it.
  static std::vector<int64_t> epoch_order(int64_t num_rows, uint64_t seed, int64_t epoch,
                                          bool shuffle = true);

 private:
  void enter_epoch(int64_t epoch);

  int64_t num_rows_;
  uint64_t seed_;
  bool shuffle_;
  DataPosition position_;
  std::vector<int64_t> order_;  // order of position_.epoch
};

}  // namespace ferry
