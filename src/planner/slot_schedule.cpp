#include "planner/slot_schedule.h"

#include <limits>

#include "core/check.h"

namespace ferry {

StepSequence step_sequence(int64_t layers, const std::vector<bool>& recomputed) {
  FERRY_ASSERT(recomputed.empty() || static_cast<int64_t>(recomputed.size()) == layers);
  auto is_recomputed = [&](int64_t b) { return !recomputed.empty() && recomputed[static_cast<size_t>(b)]; };
  StepSequence seq;
  auto use = [&](size_t unit, UsePass pass) {
    seq.units.push_back(unit);
    seq.passes.push_back(pass);
  };
  const auto layer_unit = [](int64_t l) { return static_cast<size_t>(l) + 1; };
  use(0, UsePass::Forward);  // E
  for (int64_t l = 0; l < layers; ++l) use(layer_unit(l), UsePass::Forward);
  use(layer_unit(layers), UsePass::Head);
  for (int64_t m = layers - 1; m >= 0;) {
    int64_t k = m;  // the group k .. m: boundary k kept, k+1 .. m recomputed
    while (k > 0 && is_recomputed(k)) --k;
    for (int64_t l = k; l < m; ++l) use(layer_unit(l), UsePass::Recompute);
    for (int64_t l = m; l >= k; --l) use(layer_unit(l), UsePass::Backward);
    m = k - 1;
  }
  use(0, UsePass::Backward);  // E
  return seq;
}

std::vector<size_t> step_unit_sequence(int64_t layers) {
  return step_sequence(layers, {}).units;
}

InternalsReloads internals_reloads(const std::vector<int64_t>& internals_on_host,
                                   const std::vector<SlotUse>& uses, const std::vector<UsePass>& passes) {
  InternalsReloads r;
  r.layers.assign(internals_on_host.rbegin(), internals_on_host.rend());
  for (const int64_t l : r.layers) {
    const size_t unit = static_cast<size_t>(l) + 1;  // step_sequence's units: the embedding, then the layers
    size_t i = 0;
    while (i < uses.size() && !(passes[i] == UsePass::Backward && uses[i].unit == unit)) ++i;
    FERRY_ASSERT(i < uses.size(), "every layer with internals on the host has a backward");
    r.reader.push_back(static_cast<int64_t>(i));
  }
  return r;
}

bool use_reads_weights(const std::vector<SlotUse>& uses, size_t j) {
  return !(uses[j].unit == 0 && j + 1 == uses.size());
}

std::vector<SlotUse> schedule_slots(const std::vector<size_t>& sequence, const std::vector<bool>& resident,
                                    int64_t slots) {
  FERRY_ASSERT(slots >= 1);
  std::vector<SlotUse> uses(sequence.size());
  std::vector<int64_t> occupant(static_cast<size_t>(slots), -1);  // unit in each slot
  std::vector<int64_t> last_use(static_cast<size_t>(slots), -1);  // index of the slot's latest use
  auto next_use = [&](int64_t unit, size_t after) -> size_t {
    for (size_t j = after + 1; j < sequence.size(); ++j)
      if (static_cast<int64_t>(sequence[j]) == unit) return j;
    return std::numeric_limits<size_t>::max();
  };
  for (size_t i = 0; i < sequence.size(); ++i) {
    const size_t unit = sequence[i];
    SlotUse& use = uses[i];
    use.unit = unit;
    if (resident[unit]) continue;
    int64_t slot = -1;
    for (int64_t s = 0; s < slots; ++s)
      if (occupant[static_cast<size_t>(s)] == static_cast<int64_t>(unit)) slot = s;
    if (slot < 0) {
      // Belady: an empty slot, else the one whose occupant is needed furthest ahead.
      size_t furthest = 0;
      for (int64_t s = 0; s < slots; ++s) {
        const int64_t o = occupant[static_cast<size_t>(s)];
        const size_t next = o < 0 ? std::numeric_limits<size_t>::max() : next_use(o, i);
        if (slot < 0 || next > furthest ||
            (next == furthest && last_use[static_cast<size_t>(s)] < last_use[static_cast<size_t>(slot)])) {
          slot = s;
          furthest = next;
        }
      }
      use.load = true;
      use.previous_use = last_use[static_cast<size_t>(slot)];
      occupant[static_cast<size_t>(slot)] = static_cast<int64_t>(unit);
    }
    use.slot = slot;
    last_use[static_cast<size_t>(slot)] = static_cast<int64_t>(i);
  }
  return uses;
}

}  // namespace ferry
