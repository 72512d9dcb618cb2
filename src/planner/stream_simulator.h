// A discrete-event simulation of the engine's timelines, the core of the cost model
// (planner/cost_model.h). Pure arithmetic: no clock, no threads.
//
// Seven lanes, each a FIFO that runs one task at a time in the order the tasks were added:
//   Host      the thread that issues the step; its tasks take no time, they are the points where
//             it blocks (waiting for a CPU update before an upload, reading the loss);
//   Compute   the GPU's compute stream;
//   H2D, D2H  the copy streams (pinned host memory <-> device);
//   bulk H2D, bulk D2H  the second copy stream of each direction (layers' internals on the host,
//             the streamed optimizer state's pieces and their AdamW);
//   Cpu       the UnitUpdater's worker thread (filing landed norm partials, AdamW on the thread pool);
//   Disk      the disk tier's reads and write-backs of optimizer state (engine/disk_state_tier.h),
//             timed by the caller from the disk's rates (one request stream: reads and writes
//             share the drive).
// A task starts when its lane's previous task has finished and every task it depends on has.
// A task may depend only on tasks added before it, so the graph has no cycles by construction.
//
// Copies share the PCIe link: while an h2d and a d2h copy both move bytes, each runs at its duplex
// rate, otherwise at its rate alone. The two lanes of one direction share its copy engine: one
// copy at a time, the first that is ready (the main lane's on a tie), at the direction's full
// rate -- on the H200 a 0.5 GB boundary offload issued on its stream behind a 5.6 GB internals
// copy on the other waited for all of it (docs/performance.md, call 15b). Copies and the CPU lane also share
// host DRAM: the DMA reads and writes the memory the CPU AdamW streams through, so while both run, each goes
// at a fraction of its rate (HostMemorySharing). Fluid model: rates are re-evaluated whenever a task starts
// or ends. A copy first spends the link's latency, then moves its bytes.
//
// For every task the simulation keeps the predecessor that released it last (its "binding"
// predecessor); walking those back from the end of a step gives the step's critical path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace ferry {

enum class Lane : int {
  Host,
  Compute,
  HostToDevice,
  DeviceToHost,
  Cpu,
  Disk,
  BulkHostToDevice,
  BulkDeviceToHost
};
constexpr int kLaneCount = 8;
const char* lane_name(Lane lane);

// What a task is, for the explanation of a prediction (the critical path by kind).
enum class TaskKind : int {
  HostWait,
  TokenUpload,
  WeightUpload,      // a streamed unit's weights into its slot
  ResidentUpload,    // a resident unit's new weights, once per step
  ActivationReload,  // an offloaded boundary activation back for the backward
  ActivationOffload,
  GradientDownload,
  LossReadback,
  EmbeddingForward,
  LayerForward,
  Head,           // final norm + LM head + loss, forward and backward
  LayerBackward,  // recompute + backward
  EmbeddingBackward,
  GpuAdamW,
  GpuGradNorm,     // a host unit's gradient-norm partials, before its gradient leaves
  GradientLanded,  // CPU: the updater files a landing's norm partials
  CpuAdamW,
  DiskRead,   // a disk unit's optimizer state into a RAM buffer, ahead of its update
  DiskWrite,  // and back, behind it
  // Several devices (engine/device_share.h): the all-gather of a unit's weight shards after its
  // upload (h2d stream), and the all-reduce of its gradient before it leaves (compute stream).
  WeightGather,
  GradientReduce,
  // A layer's internals to the host after its forward and back before its backward (bulk lanes).
  InternalsOffload,
  InternalsReload,
  // A streamed-state unit's update (engine/device_optimizer.h), a piece at a time: its master, m
  // and v up and the GPU AdamW over them (bulk h2d lane), and back down (bulk d2h lane).
  StateUpload,
  StateDownload,
};
constexpr int kTaskKindCount = 25;
const char* task_kind_name(TaskKind kind);
// The lane a kind of task runs on.
Lane task_lane(TaskKind kind);

struct CopyRates {
  double h2d_bytes_per_s = 0.0;
  double d2h_bytes_per_s = 0.0;
  double duplex_h2d_bytes_per_s = 0.0;  // each direction while the other moves bytes too
  double duplex_d2h_bytes_per_s = 0.0;
  double latency_s = 0.0;  // per copy
};

// Host DRAM shared by the copies and the CPU lane: each one's rate while the other works, as a
// fraction of its rate without it (1: no sharing).
struct HostMemorySharing {
  double cpu_beside_copy = 1.0;    // CPU work while one copy direction moves bytes
  double cpu_beside_duplex = 1.0;  // while both directions do
  double copy_beside_cpu = 1.0;    // a copy alone on the link while the CPU works
  double duplex_beside_cpu = 1.0;  // each direction of duplex copies while the CPU works
};

struct SimTask {
  Lane lane = Lane::Host;
  TaskKind kind = TaskKind::HostWait;
  double seconds = 0.0;  // compute and CPU tasks; copies add CopyRates::latency_s themselves
  double bytes = 0.0;    // copies only
  // What the task works on, so that a graph can be read against the engine it mirrors: a unit
  // (ModelLayout::units), or for an activation or internals copy the boundary (the input of that
  // layer) or the layer;
  // -1 for the step's tokens, the loss and host waits.
  int32_t subject = -1;
  int32_t first_dep = 0, dep_count = 0;
};

struct TaskTiming {
  double start = 0.0, end = 0.0;
  int32_t binding = -1;  // the predecessor (dependency or lane predecessor) that finished last; -1: none
};

class TaskGraph {
 public:
  // Adds a task after every task added so far on its lane; `deps` are earlier task ids (negative
  // ids are ignored: "no such event yet").
  int32_t add(Lane lane, TaskKind kind, double seconds, double bytes, std::span<const int32_t> deps,
              int32_t subject = -1);
  void reserve(size_t tasks);
  size_t size() const { return tasks_.size(); }
  const SimTask& task(int32_t id) const { return tasks_[static_cast<size_t>(id)]; }
  const int32_t* deps(int32_t id) const { return deps_.data() + tasks_[static_cast<size_t>(id)].first_dep; }
  const std::vector<int32_t>& lane_tasks(Lane lane) const { return lanes_[static_cast<int>(lane)]; }

 private:
  std::vector<SimTask> tasks_;
  std::vector<int32_t> deps_;
  std::vector<int32_t> lanes_[kLaneCount];
};

// Runs the graph to completion; timings are indexed by task id.
std::vector<TaskTiming> simulate(const TaskGraph& graph, const CopyRates& rates,
                                 const HostMemorySharing& sharing = {});

}  // namespace ferry
