// The cost model (DESIGN.md §3, planner/: profile → cost model → search): predicts a plan's
// steady-state step time and its peak memory, from the model's shape and a machine profile alone
// (no weights, no device).
//
// Time: the engine's steps are replayed as a task graph (planner/step_program.h) and run through
// the stream simulator (planner/stream_simulator.h) -- compute, h2d and d2h streams, the CPU
// updater's worker and the issuing host thread, with the PCIe link shared when both directions
// move bytes. Three steps are simulated from a state where every update is done; the last one is
// the steady state (the host reads the loss at the end of every step, so a step's pattern repeats
// once the previous step's CPU updates overlap its forward, which takes one step to set in: the
// second and later steps take the same time).
//
// Memory: planner/memory_model.h, the arithmetic the engine allocates by. Disk: the disk tier's
// file (planner/disk_tier_layout.h), read and written back once per step.
//
// The explanation is the steady step's critical path: walking back from the step's end through
// the predecessor that released each task last, the time is split among the resources (and the
// kinds of work) that the step actually waited for. The bottleneck is the resource with the
// largest share: making it faster is what makes the step faster.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/step_program.h"
#include "planner/stream_simulator.h"

namespace ferry {

// Seconds per lane (indexed by Lane).
using LaneSeconds = std::array<double, kLaneCount>;

struct Prediction {
  double step_seconds = 0.0;  // steady state
  double tokens_per_second = 0.0;
  std::vector<double> simulated_steps;  // every simulated step's time, the first one included
  LaneSeconds busy{};                   // work each lane does in the steady step
  LaneSeconds critical{};               // the steady step's critical path, split by lane
  std::array<double, kTaskKindCount> critical_by_kind{};
  Lane bottleneck = Lane::Compute;
  double gpu_idle_fraction = 0.0;  // 1 - compute busy / step time
  DeviceBytes device;              // peak device memory = device.total()
  HostBytes host;                  // pageable and pinned
  size_t disk_bytes = 0;           // the disk tier's file: optimizer state on disk, read + written each step

  // "bound by GPU compute: critical path 7.9 s compute (layer backwards 5.2 s, ...), 0.4 s CPU ...".
  std::string explain() const;
};

constexpr int kSimulatedSteps = 3;

Prediction predict(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                   const MachineProfile& profile, const StepShape& shape);

}  // namespace ferry
