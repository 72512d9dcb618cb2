// Which GPU slot each use of a streamed unit occupies during a step, and when a slot must be
// (re)loaded: a pure function of the order of use and the number of slots, so it can be tested
// alone and printed in the plan. It lives in the planner because the cost model replays the
// engine's schedule with the same function (planner/cost_model.h).
//
// A step uses units in the order  E, L0 .. L(n-1), H, L(n-1) .. L0, E  (forward, head, backward);
// with recomputed boundaries (planner/boundary_groups.h) the backward of each group of layers
// k .. m is preceded by the forwards of k .. m-1 that recompute the group's boundaries, which
// read the layers' weights like any use: L(m-1) .. is then  L(k) .. L(m-1), L(m) .. L(k).
// Resident units never occupy a slot. Eviction is Belady's: the slot whose unit is needed again
// furthest in the future (or never) is reused, which is optimal for a known sequence. A unit whose
// weights change between two uses (an update between steps) is always reloaded: schedules are per
// step, and every step starts with empty slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry {

struct SlotUse {
  size_t unit = 0;
  int64_t slot = -1;          // -1: the unit is resident
  bool load = false;          // upload the unit's weights into the slot before this use
  int64_t previous_use = -1;  // for loads: the last use of this slot before this one (-1: none)
};

std::vector<SlotUse> schedule_slots(const std::vector<size_t>& sequence, const std::vector<bool>& resident,
                                    int64_t slots);

// What a use of a unit computes.
enum class UsePass {
  Forward,    // the embedding's or a layer's forward
  Head,       // the head's forward, loss and backward
  Recompute,  // a layer's forward again in the backward, rewriting a recomputed boundary
  Backward,   // a layer's or the embedding's backward
};

struct StepSequence {
  std::vector<size_t> units;    // the unit of each use
  std::vector<UsePass> passes;  // what each use computes
};

// The uses of one step of a model with `layers` decoder layers; `recomputed` (empty: none) says per
// boundary whether the backward recomputes it (BoundaryGroups::recomputed).
StepSequence step_sequence(int64_t layers, const std::vector<bool>& recomputed);
// The units of step_sequence(layers, {}): every boundary kept.
std::vector<size_t> step_unit_sequence(int64_t layers);

// Whether use j of a step's schedule (step_sequence order) reads its unit's weights: all but
// the embedding's backward (the last use), whose scatter into the gradient reads none; its slot
// is claimed, not filled.
bool use_reads_weights(const std::vector<SlotUse>& uses, size_t j);

// The layers whose internals wait on the host (BoundaryGroups::internals_on_host) in the order the
// backward reloads them, last first, and the backward use (step_sequence order) of each: the use
// after which its staging buffer is free for the next reload into it.
struct InternalsReloads {
  std::vector<int64_t> layers;
  std::vector<int64_t> reader;
};
InternalsReloads internals_reloads(const std::vector<int64_t>& internals_on_host,
                                   const std::vector<SlotUse>& uses, const std::vector<UsePass>& passes);

}  // namespace ferry
