#include "core/error.h"
#include "planner/boundary_groups.h"
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

// Offloaded boundaries share one staging buffer unless two adjacent boundaries are both offloaded
// (a layer would then read one while it writes the other): one in K >= 2 kept, or offloaded ones
// between boundaries kept on the GPU, take one; every boundary offloaded takes two, in turn.
TEST(SlotSchedule, OneStagingBufferUnlessTwoAdjacentBoundariesAreOffloaded) {
  using A = ActivationPlacement;
  const BoundaryGroups every_second = boundary_groups(keep_every_kth(6, 2, A::OffloadToHost));
  EXPECT_EQ(every_second.staging_buffers, 1);
  EXPECT_EQ(every_second.staging, (std::vector<int64_t>{0, -1, 0, -1, 0, -1}));
  EXPECT_EQ(boundary_groups({A::OffloadToHost, A::KeepOnGpu, A::OffloadToHost}).staging_buffers, 1);
  const BoundaryGroups every_one = boundary_groups(keep_every_kth(4, 1, A::OffloadToHost));
  EXPECT_EQ(every_one.staging_buffers, 2);
  EXPECT_EQ(every_one.staging, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(boundary_groups({A::KeepOnGpu, A::OffloadToHost, A::OffloadToHost, A::KeepOnGpu}).staging_buffers,
            2);
  EXPECT_EQ(boundary_groups({A::KeepOnGpu, A::KeepOnGpu}).staging_buffers, 0);
  // Plan::one_staging_buffer false: two in turn whatever the placement.
  const BoundaryGroups two = boundary_groups(keep_every_kth(6, 2, A::OffloadToHost), false);
  EXPECT_EQ(two.staging_buffers, 2);
  EXPECT_EQ(two.staging, (std::vector<int64_t>{0, -1, 1, -1, 0, -1}));
}

// Recomputed boundaries (planner/boundary_groups.h): each group's layers run forward again, from
// its kept boundary up, just before the group's backwards. Five layers keeping every second
// boundary: groups {4}, {2, 3}, {0, 1}.
TEST(SlotSchedule, RecomputedBoundariesPrecedeTheirGroupsBackward) {
  const BoundaryGroups g = boundary_groups(keep_every_kth(5, 2, ActivationPlacement::OffloadToHost));
  const StepSequence seq = step_sequence(5, g.recomputed);
  EXPECT_EQ(seq.units, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 5, 3, 4, 3, 1, 2, 1, 0}));
  using P = UsePass;
  EXPECT_EQ(seq.passes,
            (std::vector<UsePass>{P::Forward, P::Forward, P::Forward, P::Forward, P::Forward, P::Forward,
                                  P::Head, P::Backward, P::Recompute, P::Backward, P::Backward, P::Recompute,
                                  P::Backward, P::Backward, P::Backward}));
  // Three layers in one group of four: 0 .. 2 forward again before the backward of 3.
  const StepSequence one =
      step_sequence(4, boundary_groups(keep_every_kth(4, 7, ActivationPlacement::KeepOnGpu)).recomputed);
  EXPECT_EQ(one.units, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 3, 2, 1, 0}));
  EXPECT_EQ(step_sequence(3, {}).units, step_unit_sequence(3));
  for (int64_t slots : {1, 2, 3, 5}) {
    expect_consistent(seq.units, std::vector<bool>(7, false), slots);
    expect_consistent(one.units, std::vector<bool>(6, false), slots);
  }
}

TEST(BoundaryGroups, BuffersAndStagingFollowThePlacements) {
  using A = ActivationPlacement;
  const BoundaryGroups g = boundary_groups({A::OffloadToHost, A::Recompute, A::Recompute, A::KeepOnGpu,
                                            A::Recompute, A::OffloadToHost, A::OffloadToHost, A::Recompute});
  EXPECT_EQ(g.recompute_buffers, 2);
  EXPECT_EQ(g.recompute_buffer, (std::vector<int64_t>{-1, 0, 1, -1, 0, -1, -1, 0}));
  EXPECT_EQ(g.group_base, (std::vector<int64_t>{0, 0, 0, 3, 3, 5, 6, 6}));
  // Offloaded boundaries take the two staging buffers in turn, whatever lies between them.
  EXPECT_EQ(g.staging, (std::vector<int64_t>{0, -1, -1, -1, -1, 1, 0, -1}));
  EXPECT_TRUE(g.any_offloaded);
  EXPECT_EQ(boundary_group_size({A::KeepOnGpu, A::KeepOnGpu}), 1);
  EXPECT_EQ(boundary_group_size(keep_every_kth(32, 4, A::OffloadToHost)), 4);
  EXPECT_EQ(boundary_group_size(keep_every_kth(32, 5, A::OffloadToHost)), 5);  // the last group has 2
  EXPECT_THROW(boundary_groups({A::Recompute, A::KeepOnGpu}), Error);
  EXPECT_THROW(keep_every_kth(4, 0, A::KeepOnGpu), Error);
}

// Internals on the host take the ring's buffers in layer order and come back last layer first,
// each reload's staging buffer freed by the backward use of the layer before it in that buffer.
TEST(BoundaryGroups, InternalsOnTheHostTakeTheirRingInTurnAndComeBackLastFirst) {
  using A = ActivationPlacement;
  const BoundaryGroups g = boundary_groups({A::OffloadWithInternals, A::OffloadToHost,
                                            A::OffloadWithInternals, A::KeepOnGpu, A::OffloadWithInternals});
  EXPECT_EQ(g.internals_on_host, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(g.internals_staging, (std::vector<int64_t>{0, -1, 1, -1, 0}));
  EXPECT_EQ(g.internals_staging_buffers, 2);
  EXPECT_EQ(g.staging, (std::vector<int64_t>{0, 1, 0, -1, 1}));  // their boundaries are offloaded too
  EXPECT_EQ(boundary_groups({A::KeepOnGpu, A::OffloadWithInternals}).internals_staging_buffers, 1);
  const StepSequence seq = step_sequence(5, g.recomputed);
  const std::vector<SlotUse> uses = schedule_slots(seq.units, std::vector<bool>(7, false), 2);
  const InternalsReloads r = internals_reloads(g.internals_on_host, uses, seq.passes);
  EXPECT_EQ(r.layers, (std::vector<int64_t>{4, 2, 0}));
  // E, L0..L4, H, then the backwards L4 (use 7) .. L0 (use 11).
  EXPECT_EQ(r.reader, (std::vector<int64_t>{7, 9, 11}));
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
