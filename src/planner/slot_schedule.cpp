#include "planner/slot_schedule.h"

#include <limits>

#include "core/check.h"

namespace ferry {

std::vector<size_t> step_unit_sequence(int64_t layers) {
  std::vector<size_t> seq;
  const size_t head = static_cast<size_t>(layers) + 1;
  for (size_t u = 0; u <= head; ++u) seq.push_back(u);                                  // E, L0 .. L(n-1), H
  for (int64_t l = layers - 1; l >= 0; --l) seq.push_back(static_cast<size_t>(l) + 1);  // L(n-1) .. L0
  seq.push_back(0);                                                                     // E (backward)
  return seq;
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
