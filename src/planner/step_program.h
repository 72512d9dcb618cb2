// The sliding engine's steps as a task graph for the stream simulator: the same issue order, the
// same waits, the same copies as SlidingEngine::step and the UnitUpdater's worker, with durations
// from a machine profile. Kept next to the engine's code by its structure: one function per thing
// the engine does (issue_load, ensure_resident, offload, reload, send_gradients, the updater's
// landing), each adding what the engine adds to its streams.
//
// What the engine does and the graph therefore holds, per step:
//   * the host thread issues everything in use order (E, L0..L(n-1), H, L(n-1)..L0, E) and blocks
//     only where the engine blocks: before uploading a unit whose CPU update of the previous step
//     is not done, and at the end of the step on the loss and on the global norm the updater
//     computes after the step's last landing (it then starts the next step);
//   * a streamed unit's upload waits for the slot's previous use to release it (its gradient
//     download, or its compute), and is issued up to gpu_slots - 1 uses ahead (Belady schedule,
//     planner/slot_schedule.h); a resident unit is re-uploaded once per step, just before its
//     first use, after its update;
//   * offloaded boundaries go through a ring of two staging buffers, taken in turn: the forward
//     that writes one waits until the offloaded boundary before the previous one has left it; the backward's
//     reload of boundary l is issued one use ahead, after the compute that last read its staging buffer;
//   * each backward's gradient gets its norm partials on the compute stream, then both are copied
//     to the host and handed to the CPU worker, which files the partials in landing order; then either
//     the update at once (DuringBackward), or, once every gradient of the step has been taken in
//     (the global norm), the updates in unit order E, L0, L1, ..., H (AfterBackward) -- which the
//     next step's forward follows unit by unit;
//   * units with the optimizer on the GPU (engine/device_optimizer.h) get no uploads and no CPU
//     work; beside host units, their norm partials (8 bytes per 8Ki parameters) go to the
//     updater like a gradient. Their GPU AdamW runs on the compute stream: right after their
//     backward without clipping; with it, once the host has the step's norm, ahead of the next
//     forward; every unit on the GPU: all of them at the end of the backward.
//   * a plan in sweeps (Plan::sweeps) repeats the uses once per sweep, over its micro-chunks; the
//     gradients leave (and the updater hears of them) only after the last sweep's.
//   * the untied embedding updated on the host is row-sparse (unit_updater.h): its rows without a
//     gradient are updated on the CPU after the step's upload of it, and at the step's end only
//     the token rows go down and are updated (their expected count for uniformly drawn ids);
//     its backward claims a slot without uploading weights.
// Not modelled, because they are below the profile's resolution: the memsets of gradient
// buffers, the host's batch assembly between steps, event bookkeeping; and the row-sparse
// embedding's upload range by range as its token pass gets through the table
// (UnitUpdater::kRowRanges): the program uploads it after the whole pass, so it errs long by up to
// the shorter of the two (the flagship 8B: ~20 ms of a 6 s step).
//
// A layer's backward includes the recompute of its forward (the profile's layer_backward), except
// for a layer that keeps its internals (ActivationPlacement::KeepWithInternals). A recomputed
// boundary (planner/boundary_groups.h) costs one more layer forward in the backward (a
// Recompute use, before its group's backwards), whose weights that use reads too: the slot
// schedule uploads them once more where the slots cannot hold the group.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/stream_simulator.h"

namespace ferry {

// The batch geometry of a step.
struct StepShape {
  int64_t chunk_tokens = 0;  // tokens per micro-chunk: micro_batch x seq_len
  int64_t chunks = 0;        // micro-chunks per step: global_batch / micro_batch
  int64_t tokens() const { return chunk_tokens * chunks; }
};

struct StepProgram {
  TaskGraph graph;
  std::vector<int32_t> step_end;  // per step: the host's last wait (loss, norm): the step returns after it
};

// `steps` consecutive steps from a state where every update is done (the first step after
// loading). Throws ferry::Error when the plan needs a rate the profile does not have (GPU AdamW on
// a device without one).
StepProgram build_step_program(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                               const MachineProfile& profile, const StepShape& shape, int steps);

}  // namespace ferry
