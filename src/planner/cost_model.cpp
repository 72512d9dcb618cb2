#include "planner/cost_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "planner/disk_tier_layout.h"

namespace ferry {

namespace {

double overlap(double start, double end, double from, double to) {
  return std::max(0.0, std::min(end, to) - std::max(start, from));
}

}  // namespace

std::string Prediction::explain() const {
  std::string text = fmt::format("bound by {}: the critical path of the {:.4g} s step is",
                                 lane_name(bottleneck), step_seconds);
  std::array<int, kLaneCount> lanes;
  for (int l = 0; l < kLaneCount; ++l) lanes[static_cast<size_t>(l)] = l;
  std::sort(lanes.begin(), lanes.end(), [&](int a, int b) { return critical[a] > critical[b]; });
  bool first = true;
  for (int l : lanes) {
    if (critical[l] < 0.005 * step_seconds) continue;
    // The kinds of work of this lane on the critical path, largest first.
    std::vector<std::pair<double, int>> kinds;
    for (int k = 0; k < kTaskKindCount; ++k)
      if (static_cast<int>(task_lane(static_cast<TaskKind>(k))) == l &&
          critical_by_kind[k] >= 0.005 * step_seconds)
        kinds.emplace_back(critical_by_kind[k], k);
    std::sort(kinds.rbegin(), kinds.rend());
    std::string detail;
    for (const auto& [s, k] : kinds)
      detail += fmt::format("{}{} {:.4g} s", detail.empty() ? "" : ", ",
                            task_kind_name(static_cast<TaskKind>(k)), s);
    text += fmt::format("{} {:.4g} s {}{}", first ? "" : ";", critical[l], lane_name(static_cast<Lane>(l)),
                        detail.empty() ? "" : " (" + detail + ")");
    first = false;
  }
  text += fmt::format(
      "; busy: compute {:.4g} s, h2d {:.4g} s, d2h {:.4g} s{}, CPU {:.4g} s{}; GPU idle {:.0f}%",
      busy[static_cast<int>(Lane::Compute)], busy[static_cast<int>(Lane::HostToDevice)],
      busy[static_cast<int>(Lane::DeviceToHost)],
      busy[static_cast<int>(Lane::BulkHostToDevice)] + busy[static_cast<int>(Lane::BulkDeviceToHost)] > 0
          ? fmt::format(", bulk h2d {:.4g} s, d2h {:.4g} s (layers' internals, streamed optimizer state)",
                        busy[static_cast<int>(Lane::BulkHostToDevice)],
                        busy[static_cast<int>(Lane::BulkDeviceToHost)])
          : std::string(),
      busy[static_cast<int>(Lane::Cpu)],
      disk_bytes > 0 ? fmt::format(", disk {:.4g} s", busy[static_cast<int>(Lane::Disk)]) : std::string(),
      100.0 * gpu_idle_fraction);
  return text;
}

Prediction predict(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                   const MachineProfile& profile, const StepShape& shape) {
  const StepProgram program = build_step_program(config, layout, plan, profile, shape, kSimulatedSteps);
  CopyRates rates;
  rates.h2d_bytes_per_s = profile.transfer.h2d_bytes_per_s;
  rates.d2h_bytes_per_s = profile.transfer.d2h_bytes_per_s;
  rates.duplex_h2d_bytes_per_s = profile.transfer.duplex_h2d_bytes_per_s;
  rates.duplex_d2h_bytes_per_s = profile.transfer.duplex_d2h_bytes_per_s;
  rates.latency_s = profile.transfer.latency_s;
  const std::vector<TaskTiming> timing = simulate(program.graph, rates, profile.host.memory_sharing);

  Prediction p;
  double previous_end = 0.0;
  for (int32_t end_task : program.step_end) {
    const double end = timing[static_cast<size_t>(end_task)].end;
    p.simulated_steps.push_back(end - previous_end);
    previous_end = end;
  }
  const size_t last = program.step_end.size() - 1;
  const double from = last > 0 ? timing[static_cast<size_t>(program.step_end[last - 1])].end : 0.0;
  const double to = timing[static_cast<size_t>(program.step_end[last])].end;
  p.step_seconds = to - from;
  // The run's tokens: every device of a group runs a step of `shape` (Plan::devices).
  p.tokens_per_second =
      p.step_seconds > 0
          ? static_cast<double>(shape.tokens() * std::max<int64_t>(1, plan.devices)) / p.step_seconds
          : 0.0;

  for (size_t id = 0; id < program.graph.size(); ++id) {
    const SimTask& t = program.graph.task(static_cast<int32_t>(id));
    p.busy[static_cast<int>(t.lane)] += overlap(timing[id].start, timing[id].end, from, to);
  }
  for (int32_t id = program.step_end[last]; id >= 0 && timing[static_cast<size_t>(id)].end > from;
       id = timing[static_cast<size_t>(id)].binding) {
    const SimTask& t = program.graph.task(id);
    const double s =
        overlap(timing[static_cast<size_t>(id)].start, timing[static_cast<size_t>(id)].end, from, to);
    p.critical[static_cast<int>(t.lane)] += s;
    p.critical_by_kind[static_cast<int>(t.kind)] += s;
  }
  int bottleneck = static_cast<int>(Lane::Compute);
  for (int l = 0; l < kLaneCount; ++l)
    if (p.critical[l] > p.critical[bottleneck]) bottleneck = l;
  p.bottleneck = static_cast<Lane>(bottleneck);
  p.gpu_idle_fraction = p.step_seconds > 0
                            ? std::max(0.0, 1.0 - p.busy[static_cast<int>(Lane::Compute)] / p.step_seconds)
                            : 0.0;

  p.device = device_bytes(config, layout, plan, shape.chunk_tokens, shape.chunks);
  p.host = host_bytes(config, layout, plan, shape.chunk_tokens, shape.chunks);
  p.disk_bytes = disk_tier_layout(layout, plan).file_bytes;
  return p;
}

}  // namespace ferry
