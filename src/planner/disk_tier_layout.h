// Where the disk tier puts each unit's optimizer state (planner/plan.h Plan::state_on_disk): the
// arithmetic the engine's DiskStateTier allocates by and the memory model and cost model count by.
//
// The file holds one region per disk-resident unit, in the order the CPU updater updates them
// (the units are read in that order, so consecutive reads are sequential on the disk); a region
// holds the unit's state arrays in the plan's format (optim/state_arrays.h: fp32's three, or a
// lean format's bf16 master, 8-bit moments and their block scales) one after another, each
// starting at a multiple of UringFile::kAlignment (O_DIRECT wants the file offset, the buffer
// address and the length aligned; a lean unit's scale array is numel/16 bytes, rarely a multiple
// of 4096, so each array is padded to the next). A RAM slot holds one region, so the slots are
// sized to the largest one and every array in a slot starts aligned too.
//
// The updater's order: after the backward, units in index order (embedding, layer 0, 1, ...);
// during the backward, as gradients land (head, last layer, ..., layer 0).
#pragma once

#include <cstddef>
#include <vector>

#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

struct DiskTierLayout {
  std::vector<size_t> order;  // the disk units, in the updater's order (repeats every step)
  // Per unit of the model (meaningful for disk units): the region's offset in the file, its
  // bytes, and its arrays' offsets and sizes within it.
  std::vector<size_t> region_offset, region_bytes;
  std::vector<std::vector<size_t>> array_offset, array_bytes;
  size_t slot_bytes = 0;  // the largest region
  size_t slots = 0;       // Plan::disk_slots
  size_t file_bytes = 0;  // the whole file
  // RAM the slots take (one mapping of slots × slot_bytes).
  size_t ram_bytes() const { return slots * slot_bytes; }
  // State bytes read and written back per step (each disk unit's region once each way).
  size_t bytes_per_step() const { return file_bytes; }
};

// Empty (no units, no bytes) for a plan without disk units.
DiskTierLayout disk_tier_layout(const ModelLayout& layout, const Plan& plan);

}  // namespace ferry
