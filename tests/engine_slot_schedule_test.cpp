#include "planner/slot_schedule.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(SlotSchedule, StepSequence) {
  EXPECT_EQ(step_unit_sequence(3), (std::vector<size_t>{0, 1, 2, 3, 4, 3, 2, 1, 0}));
}

// Every use finds its unit in its slot: replaying the loads reproduces the occupancy.
void expect_consistent(const std::vector<size_t>& seq, const std::vector<bool>& resident, int64_t slots) {
  const auto uses = schedule_slots(seq, resident, slots);
  std::vector<int64_t> occupant(static_cast<size_t>(slots), -1);
  for (size_t i = 0; i < uses.size(); ++i) {
    if (resident[seq[i]]) {
      EXPECT_EQ(uses[i].slot, -1);
      continue;
    }
    ASSERT_GE(uses[i].slot, 0);
    ASSERT_LT(uses[i].slot, slots);
    if (uses[i].load) occupant[static_cast<size_t>(uses[i].slot)] = static_cast<int64_t>(seq[i]);
    EXPECT_EQ(occupant[static_cast<size_t>(uses[i].slot)], static_cast<int64_t>(seq[i])) << "use " << i;
  }
}

TEST(SlotSchedule, OccupancyIsConsistent) {
  for (int64_t layers : {1, 2, 5, 32})
    for (int64_t slots : {1, 2, 3, 4}) {
      std::vector<bool> resident(static_cast<size_t>(layers) + 2, false);
      expect_consistent(step_unit_sequence(layers), resident, slots);
      resident[0] = true;
      expect_consistent(step_unit_sequence(layers), resident, slots);
    }
}

TEST(SlotSchedule, TwoSlotsPrefetchOneAheadAndKeepTheLastLayerForBackward) {
  // 4 layers, 2 slots: E L0 L1 L2 L3 H L3 L2 L1 L0 E
  const auto uses = schedule_slots(step_unit_sequence(4), std::vector<bool>(6, false), 2);
  // Every load in the forward reuses the slot of the use two back (distance 1 of prefetch).
  for (size_t i = 2; i <= 5; ++i) {
    ASSERT_TRUE(uses[i].load);
    EXPECT_EQ(uses[i].previous_use, static_cast<int64_t>(i) - 2) << i;
  }
  // L3 stays in its slot across the head: its backward needs no load.
  EXPECT_FALSE(uses[6].load);
  // Loads: E, L0..L3, H, then L2, L1, L0, E again = 10 of 11 uses.
  int loads = 0;
  for (const auto& u : uses) loads += u.load;
  EXPECT_EQ(loads, 10);
}

TEST(SlotSchedule, MoreSlotsSaveReloadsInTheBackward) {
  const auto seq = step_unit_sequence(4);
  int loads3 = 0, loads4 = 0;
  for (const auto& u : schedule_slots(seq, std::vector<bool>(6, false), 3)) loads3 += u.load;
  for (const auto& u : schedule_slots(seq, std::vector<bool>(6, false), 4)) loads4 += u.load;
  EXPECT_EQ(loads3, 9);  // L3 and L2 survive the head
  EXPECT_EQ(loads4, 8);
}

TEST(SlotSchedule, ResidentUnitsTakeNoSlot) {
  std::vector<bool> resident(6, true);
  for (const auto& u : schedule_slots(step_unit_sequence(4), resident, 2)) {
    EXPECT_EQ(u.slot, -1);
    EXPECT_FALSE(u.load);
  }
}

// Every use reads its unit's weights but the embedding's backward (the step's last use), with
// slots or resident.
TEST(SlotSchedule, OnlyTheEmbeddingsBackwardReadsNoWeights) {
  for (bool resident : {false, true}) {
    const auto uses = schedule_slots(step_unit_sequence(3), std::vector<bool>(5, resident), 2);
    for (size_t j = 0; j < uses.size(); ++j)
      EXPECT_EQ(use_reads_weights(uses, j), j + 1 < uses.size())
          << "use " << j << " of unit " << uses[j].unit;
    EXPECT_EQ(uses.back().unit, 0u);
  }
}

}  // namespace
}  // namespace ferry
