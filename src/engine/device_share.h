// One device's place in a group of devices that train one model with one host state
// (engine/device_group_engine.h, docs/several_gpus.md). Each device runs its share of a step's
// micro-chunks through its own SlidingEngine; the engines meet through collectives:
//
//  * weights: each rank uploads its shard of a unit from the one pinned staging buffer and the
//    ranks all-gather the rest (PCIe carries each unit once per upload, not once per device);
//  * gradients: after a unit's backward the ranks all-reduce its gradient, each rank copies its
//    shard down into the unit's one landing buffer on the host, and rank 0 alone computes the
//    norm partials and announces the landing to the one UnitUpdater;
//  * the loss: all-reduced before it is read.
//
// A shard is rank r's [r * c, (r + 1) * c) of a unit's n elements, c = n / size; the last rank
// also owns the tail [size * c, n), fewer than `size` elements, which every rank uploads itself
// (an all-gather moves equal counts only).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/collective.h"
#include "device/device.h"

namespace ferry {

class UnitUpdater;

struct DeviceShare {
  int rank = 0;
  int size = 1;
  // One communicator per stream (indexed by StreamKind): each stream's collectives are then issued
  // in one order on every rank, whatever the streams' interleaving (NCCL's rule, and the CPU
  // backends'), so the weights' all-gather on the h2d stream runs beside the gradients'
  // all-reduce on the compute stream.
  std::array<Collective*, kCollectiveStreamCount> collectives{};
  // The group's one host state: null for rank 0, whose engine makes it; rank 0's for the others.
  UnitUpdater* host = nullptr;
  // The most micro-chunks one step of the whole group has: the embedding's row gradients of a step
  // land in one host buffer sized for them.
  int64_t group_max_chunks = 0;

  Collective& on(StreamKind stream) const { return *collectives[static_cast<size_t>(stream)]; }
};

// What the whole step's batch says, which every device's share needs: the loss and the gradients
// are scaled by the step's counted targets, and the embedding's rows are those of every share.
struct GroupStep {
  int64_t counted_tokens = 0;
  std::vector<int32_t> rows;  // the step's distinct token ids, sorted
};

// The elements of a unit of `numel` one rank uploads and sends (see above).
struct UnitShard {
  size_t begin = 0, end = 0;  // this rank's shard of the all-gather: [begin, end), per_rank long
  size_t per_rank = 0;
  size_t tail_begin = 0;  // [tail_begin, numel): the tail
  size_t send_end = 0;    // what this rank sends down: [begin, send_end) (the last rank: with the tail)
};
UnitShard unit_shard(size_t numel, int rank, int size);

// Rank r's rows of a step's `rows` distinct ids: [begin, end), ceil(rows / size) each but the last
// ones, so no rank gathers more than its share of the step's tokens could name.
struct RowShard {
  int64_t begin = 0, end = 0;
};
RowShard row_shard(int64_t rows, int rank, int size);

}  // namespace ferry
