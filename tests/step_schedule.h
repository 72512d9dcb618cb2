// One form for the schedule of training steps, whichever side it is read from: the sliding engine
// as it ran (tests/train_step_program_mirror_test.cpp), or the task graph the cost model simulates
// (planner/step_program.h). Two schedules are the same when
//   * every lane (the host thread's waits, the compute, h2d and d2h streams, the CPU updater's
//     worker) runs the same tasks in the same order, a task named by the program's kind and what
//     it works on ("layer backwards (and recomputes) layer.2", "activation reloads boundary 1");
//   * the host thread issues the device's work in the same order (which says, beyond the waits,
//     how far ahead of the compute it uploads);
//   * they order the lanes alike: for every task and every other lane, the last task there that
//     must be done before it starts is the same one. That is the happens-before closure of lane
//     order and waits, so a wait that another already implies is no difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "model/unit_layout.h"
#include "planner/stream_simulator.h"

namespace ferry::test {

class StepSchedule {
 public:
  // Adds a task at the end of `lane`; returns its id.
  int add(Lane lane, std::string label) {
    std::vector<int>& tasks = lanes_[static_cast<size_t>(lane)];
    tasks_.push_back({lane, std::move(label), static_cast<int>(tasks.size())});
    tasks.push_back(static_cast<int>(tasks_.size()) - 1);
    return tasks.back();
  }
  // Task `to` starts only after task `from` is done (of its own lane: lane order says so already).
  void wait(int from, int to) {
    if (lane_of(from) != lane_of(to)) waits_.emplace_back(from, to);
  }
  // The host thread issues `task` next (the streams' tasks and its own waits, not the CPU's).
  void issued(int task) { issue_order_.push_back(task); }
  const std::vector<int>& issue_order() const { return issue_order_; }

  size_t size() const { return tasks_.size(); }
  const std::vector<int>& lane(Lane l) const { return lanes_[static_cast<size_t>(l)]; }
  Lane lane_of(int task) const { return tasks_[static_cast<size_t>(task)].lane; }
  int position(int task) const { return tasks_[static_cast<size_t>(task)].position; }
  const std::string& label(int task) const { return tasks_[static_cast<size_t>(task)].label; }

  // Per task, per other lane: the position there of the last task that happens before it (lane
  // order and waits, transitively); -1: none. Its own lane's entry is -1. A wait cycle is a
  // failed expectation (no schedule can run it).
  std::vector<std::array<int, kLaneCount>> happens_before() const {
    const size_t n = tasks_.size();
    std::vector<std::vector<int>> before(n);  // direct predecessors
    for (const auto& tasks : lanes_)
      for (size_t k = 1; k < tasks.size(); ++k) before[static_cast<size_t>(tasks[k])].push_back(tasks[k - 1]);
    for (const auto& [from, to] : waits_) before[static_cast<size_t>(to)].push_back(from);
    std::vector<std::vector<int>> after(n);
    std::vector<int> pending(n);
    for (size_t t = 0; t < n; ++t) {
      pending[t] = static_cast<int>(before[t].size());
      for (int p : before[t]) after[static_cast<size_t>(p)].push_back(static_cast<int>(t));
    }
    std::array<int, kLaneCount> none;
    none.fill(-1);
    std::vector<std::array<int, kLaneCount>> last(n, none);
    std::vector<int> ready;
    for (size_t t = 0; t < n; ++t)
      if (pending[t] == 0) ready.push_back(static_cast<int>(t));
    size_t done = 0;
    while (!ready.empty()) {
      const int t = ready.back();
      ready.pop_back();
      ++done;
      auto& mine = last[static_cast<size_t>(t)];
      for (int p : before[static_cast<size_t>(t)]) {
        const auto& theirs = last[static_cast<size_t>(p)];
        for (int l = 0; l < kLaneCount; ++l)
          mine[static_cast<size_t>(l)] =
              std::max(mine[static_cast<size_t>(l)], theirs[static_cast<size_t>(l)]);
        auto& slot = mine[static_cast<size_t>(lane_of(p))];
        slot = std::max(slot, position(p));
      }
      mine[static_cast<size_t>(lane_of(t))] = -1;
      for (int s : after[static_cast<size_t>(t)])
        if (--pending[static_cast<size_t>(s)] == 0) ready.push_back(s);
    }
    EXPECT_EQ(done, n) << "the waits form a cycle";
    return last;
  }

 private:
  struct Task {
    Lane lane;
    std::string label;
    int position;  // on its lane
  };
  std::vector<Task> tasks_;
  std::array<std::vector<int>, kLaneCount> lanes_;
  std::vector<std::pair<int, int>> waits_;
  std::vector<int> issue_order_;
};

// A task's name: the program's kind, then the unit it works on (an activation copy: its boundary).
inline std::string task_label(TaskKind kind, int32_t subject, const ModelLayout& layout) {
  std::string label = task_kind_name(kind);
  if (subject < 0) return label;
  if (kind == TaskKind::ActivationOffload || kind == TaskKind::ActivationReload)
    return label + " boundary " + std::to_string(subject);
  if (kind == TaskKind::InternalsOffload || kind == TaskKind::InternalsReload)
    return label + " layer " + std::to_string(subject);
  return label + " " + layout.units[static_cast<size_t>(subject)].name;
}

// The program's graph in this form. Two kinds of its tasks stand for no work and become the
// waits they carry: the slot claimed by the embedding's backward (a weight upload of no bytes),
// and host waits for the CPU updater, which the engine does on a condition variable the device
// cannot see (so they are left out on both sides: see the mirror test).
inline StepSchedule program_schedule(const TaskGraph& graph, const ModelLayout& layout) {
  StepSchedule schedule;
  const auto count = static_cast<int32_t>(graph.size());
  std::vector<int> task(static_cast<size_t>(count), -1);  // per program task: its schedule task
  std::vector<std::vector<int>> stands_for(
      static_cast<size_t>(count));  // a task of no work: what its end implies
  std::array<int32_t, kLaneCount> lane_last;
  lane_last.fill(-1);
  const auto done = [&](int32_t id) {
    return task[static_cast<size_t>(id)] >= 0 ? std::vector<int>{task[static_cast<size_t>(id)]}
                                              : stands_for[static_cast<size_t>(id)];
  };
  for (int32_t id = 0; id < count; ++id) {
    const SimTask& t = graph.task(id);
    const int32_t previous = lane_last[static_cast<size_t>(t.lane)];
    lane_last[static_cast<size_t>(t.lane)] = id;
    std::vector<int32_t> deps;
    bool waits_on_work = false;  // a host wait: for something other than the host's earlier waits
    for (int32_t k = 0; k < t.dep_count; ++k) {
      const int32_t d = graph.deps(id)[k];
      const Lane from = graph.task(d).lane;
      if (t.kind == TaskKind::HostWait && from == Lane::Cpu) continue;
      waits_on_work |= from != Lane::Host;
      deps.push_back(d);
    }
    const bool no_work = (t.kind == TaskKind::WeightUpload && t.bytes == 0.0) ||
                         (t.kind == TaskKind::HostWait && !waits_on_work);
    if (no_work) {
      std::vector<int>& implied = stands_for[static_cast<size_t>(id)];
      if (previous >= 0) implied = done(previous);
      for (int32_t d : deps)
        for (int r : done(d)) implied.push_back(r);
      continue;
    }
    const int s = schedule.add(t.lane, task_label(t.kind, t.subject, layout));
    task[static_cast<size_t>(id)] = s;
    if (t.lane != Lane::Cpu) schedule.issued(s);  // tasks are added in the order the host issues them
    // A lane runs in order: what a task of no work before it waited for, it waits for too.
    if (previous >= 0)
      for (int r : done(previous)) schedule.wait(r, s);
    for (int32_t d : deps)
      for (int r : done(d)) schedule.wait(r, s);
  }
  return schedule;
}

// Equal lanes and equal happens-before; otherwise where they first part, lane by lane.
inline ::testing::AssertionResult same_schedule(const StepSchedule& engine, const StepSchedule& program) {
  std::ostringstream out;
  bool same = true;
  for (int l = 0; l < kLaneCount; ++l) {
    const Lane lane = static_cast<Lane>(l);
    const auto& e = engine.lane(lane);
    const auto& p = program.lane(lane);
    size_t k = 0;
    while (k < e.size() && k < p.size() && engine.label(e[k]) == program.label(p[k])) ++k;
    if (k == e.size() && k == p.size()) continue;
    same = false;
    out << "\n"
        << lane_name(lane) << ": " << e.size() << " tasks in the engine, " << p.size()
        << " in the program; from task " << k << " on:\n";
    for (size_t j = k; j < k + 4; ++j)
      out << "  [" << j << "] engine: " << (j < e.size() ? engine.label(e[j]) : "-")
          << " | program: " << (j < p.size() ? program.label(p[j]) : "-") << "\n";
  }
  if (!same) return ::testing::AssertionFailure() << "the lanes run different tasks:" << out.str();

  const auto issued = [](const StepSchedule& s, size_t k) {
    return k < s.issue_order().size()
               ? std::string(lane_name(s.lane_of(s.issue_order()[k]))) + ": " + s.label(s.issue_order()[k])
               : std::string("-");
  };
  const size_t issues = std::max(engine.issue_order().size(), program.issue_order().size());
  for (size_t k = 0; k < issues; ++k) {
    if (issued(engine, k) == issued(program, k)) continue;
    out << "\nthe host issues work in another order from issue " << k << " on:\n";
    for (size_t j = k; j < k + 4 && j < issues; ++j)
      out << "  [" << j << "] engine: " << issued(engine, j) << " | program: " << issued(program, j) << "\n";
    return ::testing::AssertionFailure() << out.str();
  }

  // Where the last task of another lane a task waits for changes from its lane predecessor's, on
  // one side or the other: the first task on each lane to wait differently.
  const auto e_before = engine.happens_before(), p_before = program.happens_before();
  const auto named = [](const StepSchedule& s, Lane lane, int position) {
    return position < 0
               ? std::string("nothing")
               : "[" + std::to_string(position) + "] " + s.label(s.lane(lane)[static_cast<size_t>(position)]);
  };
  int differences = 0;
  for (int l = 0; l < kLaneCount; ++l) {
    const Lane lane = static_cast<Lane>(l);
    for (int x = 0; x < kLaneCount; ++x) {
      std::pair<int, int> previous{-1, -1};
      for (size_t k = 0; k < engine.lane(lane).size(); ++k) {
        const int e = e_before[static_cast<size_t>(engine.lane(lane)[k])][static_cast<size_t>(x)];
        const int p = p_before[static_cast<size_t>(program.lane(lane)[k])][static_cast<size_t>(x)];
        const std::pair<int, int> now{e, p};
        if (e != p && now != previous && ++differences <= 12)
          out << "\n"
              << lane_name(lane) << " [" << k << "] " << engine.label(engine.lane(lane)[k]) << " waits on "
              << lane_name(static_cast<Lane>(x)) << " for " << named(engine, static_cast<Lane>(x), e)
              << " in the engine, for " << named(program, static_cast<Lane>(x), p) << " in the program";
        previous = now;
      }
    }
  }
  if (differences == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differences << " tasks wait differently:" << out.str();
}

}  // namespace ferry::test
