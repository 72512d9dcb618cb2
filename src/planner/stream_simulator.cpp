#include "planner/stream_simulator.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace ferry {

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::Host:
      return "host thread";
    case Lane::Compute:
      return "GPU compute";
    case Lane::HostToDevice:
      return "h2d copies";
    case Lane::DeviceToHost:
      return "d2h copies";
    case Lane::Cpu:
      return "CPU optimizer";
    case Lane::Disk:
      return "disk";
    case Lane::BulkHostToDevice:
      return "bulk h2d copies";
    case Lane::BulkDeviceToHost:
      return "bulk d2h copies";
  }
  return "?";
}

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::HostWait:
      return "host waits";
    case TaskKind::TokenUpload:
      return "token upload";
    case TaskKind::WeightUpload:
      return "weight uploads into slots";
    case TaskKind::ResidentUpload:
      return "resident weight uploads";
    case TaskKind::ActivationReload:
      return "activation reloads";
    case TaskKind::ActivationOffload:
      return "activation offloads";
    case TaskKind::GradientDownload:
      return "gradient downloads";
    case TaskKind::LossReadback:
      return "loss readback";
    case TaskKind::EmbeddingForward:
      return "embedding forward";
    case TaskKind::LayerForward:
      return "layer forwards";
    case TaskKind::Head:
      return "head forward+backward";
    case TaskKind::LayerBackward:
      return "layer backwards (and recomputes)";
    case TaskKind::EmbeddingBackward:
      return "embedding backward";
    case TaskKind::GpuAdamW:
      return "GPU AdamW";
    case TaskKind::GpuGradNorm:
      return "GPU gradient norm partials";
    case TaskKind::GradientLanded:
      return "CPU gradient landings";
    case TaskKind::CpuAdamW:
      return "CPU AdamW";
    case TaskKind::DiskRead:
      return "state reads";
    case TaskKind::DiskWrite:
      return "state write-backs";
    case TaskKind::WeightGather:
      return "weight all-gathers";
    case TaskKind::GradientReduce:
      return "gradient all-reduces";
    case TaskKind::InternalsOffload:
      return "internals offloads";
    case TaskKind::InternalsReload:
      return "internals reloads";
    case TaskKind::StateUpload:
      return "streamed optimizer state up and updated";
    case TaskKind::StateDownload:
      return "streamed optimizer state down";
  }
  return "?";
}

Lane task_lane(TaskKind kind) {
  switch (kind) {
    case TaskKind::HostWait:
      return Lane::Host;
    case TaskKind::TokenUpload:
    case TaskKind::WeightUpload:
    case TaskKind::ResidentUpload:
    case TaskKind::ActivationReload:
    case TaskKind::WeightGather:
      return Lane::HostToDevice;
    case TaskKind::ActivationOffload:
    case TaskKind::GradientDownload:
    case TaskKind::LossReadback:
      return Lane::DeviceToHost;
    case TaskKind::GradientLanded:
    case TaskKind::CpuAdamW:
      return Lane::Cpu;
    case TaskKind::DiskRead:
    case TaskKind::DiskWrite:
      return Lane::Disk;
    case TaskKind::InternalsReload:
    case TaskKind::StateUpload:
      return Lane::BulkHostToDevice;
    case TaskKind::InternalsOffload:
    case TaskKind::StateDownload:
      return Lane::BulkDeviceToHost;
    default:
      return Lane::Compute;
  }
}

void TaskGraph::reserve(size_t tasks) {
  tasks_.reserve(tasks);
  deps_.reserve(3 * tasks);
  for (auto& lane : lanes_) lane.reserve(tasks);
}

int32_t TaskGraph::add(Lane lane, TaskKind kind, double seconds, double bytes, std::span<const int32_t> deps,
                       int32_t subject) {
  const int32_t id = static_cast<int32_t>(tasks_.size());
  FERRY_ASSERT(task_lane(kind) == lane, "a task runs on its kind's lane");
  SimTask t;
  t.lane = lane;
  t.kind = kind;
  t.seconds = seconds;
  t.bytes = bytes;
  t.subject = subject;
  t.first_dep = static_cast<int32_t>(deps_.size());
  for (int32_t d : deps) {
    if (d < 0) continue;
    FERRY_ASSERT(d < id, "a task depends only on tasks added before it");
    deps_.push_back(d);
  }
  t.dep_count = static_cast<int32_t>(deps_.size()) - t.first_dep;
  tasks_.push_back(t);
  lanes_[static_cast<int>(lane)].push_back(id);
  return id;
}

namespace {

bool is_copy(Lane lane) {
  return lane == Lane::HostToDevice || lane == Lane::DeviceToHost || lane == Lane::BulkHostToDevice ||
         lane == Lane::BulkDeviceToHost;
}

// The other copy lane of the same direction (its copy engine's other stream); -1 for other lanes.
int engine_partner(int lane) {
  switch (static_cast<Lane>(lane)) {
    case Lane::HostToDevice:
      return static_cast<int>(Lane::BulkHostToDevice);
    case Lane::BulkHostToDevice:
      return static_cast<int>(Lane::HostToDevice);
    case Lane::DeviceToHost:
      return static_cast<int>(Lane::BulkDeviceToHost);
    case Lane::BulkDeviceToHost:
      return static_cast<int>(Lane::DeviceToHost);
    default:
      return -1;
  }
}

struct Running {
  int32_t task = -1;
  double latency_left = 0.0;  // seconds (all of a compute/CPU task's time, a copy's latency)
  double bytes_left = 0.0;
};

}  // namespace

std::vector<TaskTiming> simulate(const TaskGraph& graph, const CopyRates& rates,
                                 const HostMemorySharing& sharing) {
  constexpr double kNotDone = std::numeric_limits<double>::infinity();
  const size_t n = graph.size();
  std::vector<TaskTiming> timing(n);
  std::vector<double> end(n, kNotDone);
  size_t next[kLaneCount] = {};
  int32_t previous[kLaneCount];
  std::fill_n(previous, kLaneCount, -1);
  Running running[kLaneCount];
  double now = 0.0;
  size_t finished = 0;

  // Starts the head of `lane` if its dependencies are done; returns true when it started.
  auto try_start = [&](int l) {
    const auto& queue = graph.lane_tasks(static_cast<Lane>(l));
    if (running[l].task >= 0 || next[l] >= queue.size()) return false;
    const int partner = engine_partner(l);
    if (partner >= 0 && running[partner].task >= 0) return false;  // the direction's engine is busy
    const int32_t id = queue[next[l]];
    const SimTask& t = graph.task(id);
    const int32_t* deps = graph.deps(id);
    // The lane predecessor has finished (the lane is idle); of it, the copy engine's last copy
    // from the other lane and the dependencies, the one that finished last is the binding one.
    int32_t binding = previous[l];
    double released = binding >= 0 ? end[static_cast<size_t>(binding)] : -1.0;
    if (partner >= 0 && previous[partner] >= 0 && end[static_cast<size_t>(previous[partner])] > released) {
      binding = previous[partner];
      released = end[static_cast<size_t>(binding)];
    }
    for (int32_t k = 0; k < t.dep_count; ++k) {
      const double e = end[static_cast<size_t>(deps[k])];
      if (e == kNotDone) return false;
      if (e > released) {
        released = e;
        binding = deps[k];
      }
    }
    TaskTiming& tt = timing[static_cast<size_t>(id)];
    tt.start = now;
    tt.binding = binding;
    running[l].task = id;
    running[l].latency_left = t.seconds + (is_copy(t.lane) ? rates.latency_s : 0.0);
    running[l].bytes_left = is_copy(t.lane) ? t.bytes : 0.0;
    return true;
  };
  auto finish = [&](int l) {
    const int32_t id = running[l].task;
    timing[static_cast<size_t>(id)].end = now;
    end[static_cast<size_t>(id)] = now;
    previous[l] = id;
    running[l].task = -1;
    ++next[l];
    ++finished;
  };

  while (finished < n) {
    // Start what can start now; zero-time tasks finish at once and may release others.
    for (bool changed = true; changed;) {
      changed = false;
      for (int l = 0; l < kLaneCount; ++l) {
        if (!try_start(l)) continue;
        changed = true;
        if (running[l].latency_left <= 0.0 && running[l].bytes_left <= 0.0) finish(l);
      }
    }
    if (finished == n) break;
    const int h2d = static_cast<int>(Lane::HostToDevice), d2h = static_cast<int>(Lane::DeviceToHost);
    const int bulk_h2d = static_cast<int>(Lane::BulkHostToDevice),
              bulk_d2h = static_cast<int>(Lane::BulkDeviceToHost);
    const int cpu = static_cast<int>(Lane::Cpu);
    auto moving = [&](int l) { return running[l].task >= 0 && running[l].latency_left <= 0.0; };
    const bool up = moving(h2d) || moving(bulk_h2d), down = moving(d2h) || moving(bulk_d2h);
    const bool duplex = up && down;
    const int copies_moving = static_cast<int>(up) + static_cast<int>(down);  // one per direction at most
    const bool cpu_working = running[cpu].task >= 0 && running[cpu].latency_left > 0.0;
    // How fast each lane progresses: seconds of work per second (the CPU slows while copies move),
    // and bytes per second for a copy past its latency (slower while the CPU works).
    double work_speed[kLaneCount];
    std::fill_n(work_speed, kLaneCount, 1.0);
    work_speed[cpu] = copies_moving == 0   ? 1.0
                      : copies_moving == 1 ? sharing.cpu_beside_copy
                                           : sharing.cpu_beside_duplex;
    double byte_rate[kLaneCount] = {};
    const double copy_share = !cpu_working ? 1.0
                              : duplex     ? sharing.duplex_beside_cpu
                                           : sharing.copy_beside_cpu;
    byte_rate[h2d] = (duplex ? rates.duplex_h2d_bytes_per_s : rates.h2d_bytes_per_s) * copy_share;
    byte_rate[d2h] = (duplex ? rates.duplex_d2h_bytes_per_s : rates.d2h_bytes_per_s) * copy_share;
    byte_rate[bulk_h2d] = byte_rate[h2d];
    byte_rate[bulk_d2h] = byte_rate[d2h];
    double step = kNotDone;
    for (int l = 0; l < kLaneCount; ++l) {
      if (running[l].task < 0) continue;
      const Running& r = running[l];
      step =
          std::min(step, r.latency_left > 0.0 ? r.latency_left / work_speed[l] : r.bytes_left / byte_rate[l]);
    }
    FERRY_ASSERT(step < kNotDone, "the task graph is stuck: a task waits for one that can never run");
    now += step;
    for (int l = 0; l < kLaneCount; ++l) {
      if (running[l].task < 0) continue;
      Running& r = running[l];
      if (r.latency_left > 0.0) {
        const double done = step * work_speed[l];
        r.latency_left -= done;
        if (r.latency_left <= done * 1e-12) r.latency_left = 0.0;
      } else {
        r.bytes_left -= byte_rate[l] * step;
        if (r.bytes_left <= byte_rate[l] * step * 1e-12 + 1e-9) r.bytes_left = 0.0;
      }
      if (r.latency_left <= 0.0 && r.bytes_left <= 0.0) finish(l);
    }
  }
  return timing;
}

}  // namespace ferry
