// Boundaries recomputed in the backward (ActivationPlacement::Recompute): where each boundary
// activation lives between the forward and the backward, as one pure function of the plan's
// placements, read by the engine (buffers, schedule), the memory model and the cost model alike.
//
// A recomputed boundary belongs to the group of the nearest kept boundary below it: the group of
// kept boundary k and recomputed boundaries k+1 .. m. The forward writes each recomputed boundary
// into a GPU buffer of its own within the group (boundary b into buffer b - k - 1) and the next
// layer reads it there; the buffer is overwritten by the next group's forward. The backward, before
// the backward of layer m (the group's first), runs the forward of layers k .. m-1 again from the
// kept boundary, which writes the group's boundaries into the same buffers; the backwards of m .. k
// then read them as they read kept ones. So a plan keeping every K-th boundary holds K - 1
// boundary-sized GPU buffers instead of L - L/K boundaries on the GPU or the host, for K - 1 more
// layer forwards per K layers (planner/step_program.h counts them).
//
// Offloaded boundaries pass through a ring of two staging buffers, taken in turn by the offloaded
// boundaries in layer order (the staging index): two offloaded boundaries in a row never share a
// staging buffer, whatever lies between them, so the backward's reload of one never overwrites the
// other while a group's layers still read it. Where no two adjacent boundaries are both offloaded
// (every boundary kept with one in K >= 2 recomputed, or offloaded ones between boundaries kept on
// the GPU), no layer reads one offloaded boundary while it writes another, and one staging buffer
// serves them all: the forward writes the next offloaded boundary there once the d2h of the one
// before it completed (many layer passes earlier), and the backward reloads a boundary there once
// the use that reads the one before it completed -- a reload no longer hidden behind that use, but
// behind the recompute or backward it feeds (a boundary's h2d against a layer's compute: 39 ms of
// ~6 s at 256K tokens of an 8B), for a boundary-sized buffer less on the GPU (2 GiB there).
//
// Internals on the host (ActivationPlacement::OffloadWithInternals) pass through a ring of their own
// on the device, each buffer one layer's internals of every micro-chunk, taken in turn by such
// layers in layer order: one buffer for one such layer, two for more. The forward writes a layer's
// internals there once the d2h of the previous layer in that buffer completed; the backward
// reloads them once the backward of the layer that last read the buffer completed, so with two
// buffers a reload overlaps the backwards between the two layers sharing a buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/plan.h"

namespace ferry {

struct BoundaryGroups {
  std::vector<int64_t> staging;           // per boundary: its staging buffer (0, 1) if offloaded, else -1
  std::vector<int64_t> recompute_buffer;  // per boundary: its GPU buffer if recomputed, else -1
  std::vector<int64_t> group_base;        // per boundary: the kept boundary its group starts at
  std::vector<bool> recomputed;           // per boundary: ActivationPlacement::Recompute
  int64_t recompute_buffers = 0;          // GPU buffers for recomputed boundaries (the longest run)
  int64_t staging_buffers = 0;  // 0 (nothing offloaded), 1, or 2 (two adjacent boundaries offloaded)
  bool any_offloaded = false;
  std::vector<int64_t> internals_staging;  // per layer: its internals' staging buffer if on the host, else -1
  int64_t internals_staging_buffers = 0;   // 0, 1 (one such layer) or 2
  std::vector<int64_t> internals_on_host;  // the layers whose internals go to the host, in layer order
};

// Throws ferry::Error when the first boundary (the embedding's output, which nothing below could
// recompute) is placed Recompute. `one_staging_buffer` (Plan::one_staging_buffer): offloaded
// boundaries share one staging buffer where the placement allows it; false: two in turn.
BoundaryGroups boundary_groups(const std::vector<ActivationPlacement>& activations,
                               bool one_staging_buffer = true);

// Every `keep_every`-th boundary (0, K, 2K, ...) placed `kept`, the others Recompute; 1: all kept.
std::vector<ActivationPlacement> keep_every_kth(int64_t layers, int64_t keep_every, ActivationPlacement kept);

// The K of a plan: the longest group (1 when no boundary is recomputed).
int64_t boundary_group_size(const std::vector<ActivationPlacement>& activations);

}  // namespace ferry
