#include "engine/device_share.h"

#include <algorithm>

#include "core/error.h"

namespace ferry {

UnitShard unit_shard(size_t numel, int rank, int size) {
  FERRY_ASSERT(size >= 1 && rank >= 0 && rank < size);
  UnitShard s;
  s.per_rank = numel / static_cast<size_t>(size);
  s.begin = static_cast<size_t>(rank) * s.per_rank;
  s.end = s.begin + s.per_rank;
  s.tail_begin = static_cast<size_t>(size) * s.per_rank;
  s.send_end = rank == size - 1 ? numel : s.end;
  return s;
}

RowShard row_shard(int64_t rows, int rank, int size) {
  FERRY_ASSERT(size >= 1 && rank >= 0 && rank < size && rows >= 0);
  const int64_t each = (rows + size - 1) / size;
  return {std::min(rows, rank * each), std::min(rows, (rank + 1) * each)};
}

}  // namespace ferry
