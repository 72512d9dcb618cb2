// How the sliding engine's run becomes a StepSchedule (tests/step_schedule.h), to compare with
// the task graph the cost model simulates (tests/train_step_program_mirror_test.cpp): from what a
// ScheduleRecorder under the engine's TracingDevice wrote down and the trace's spans.
//
// Each span of a stream's track is one piece of the engine's work, named by
// the op and by the engine's innermost TraceScope ("layer.2 backward", "load layer.2", "gradients
// layer.2", "update layer.2", "offload activation"); `classify` turns (stream, scope, op) into the
// program's task kind and unit. Consecutive spans of one task with no event recorded between them
// (the ops of a layer's backward, a unit's gradient and its norm partials) are one task, issued
// where its first span is; the token uploads of two steps stay two. Offloaded boundaries are told
// apart by their pinned buffers. The stream waits come from the recorder: a wait for an event is a
// wait for the last task its stream ran before the event, and for what that stream was itself
// waiting for then (waits with no work after them, as where the embedding's backward claims its
// slot without an upload). The CPU updater's lane is its spans (an AdamW pass each) with a landing
// at each of its waits for a gradient, named by the copy it waits for; the host thread's lane is
// its synchronizations, and every task waits for the host's last synchronization before it was
// issued. The d2h stream's wait for a free buffer of the gradient ring (a host task) is a wait for
// the update of the gradient that last landed in that buffer.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device/trace/trace_span.h"
#include "model/unit_layout.h"
#include "planner/plan.h"
#include "planner/stream_simulator.h"
#include "schedule_recorder.h"
#include "step_schedule.h"

namespace ferry::test {

// Work the engine issues that the program has no task for, by what it is (see the mirror test).
constexpr const char* kMemsets = "memsets";
constexpr const char* kDeviceNormPartials = "device units' norm partials";
constexpr const char* kDeviceNormSum = "device norm sum and clip coefficient";
constexpr const char* kRowGather = "embedding row gather";

inline Lane stream_lane(int stream) {
  switch (static_cast<StreamKind>(stream)) {
    case StreamKind::Compute:
      return Lane::Compute;
    case StreamKind::HostToDevice:
      return Lane::HostToDevice;
    case StreamKind::DeviceToHost:
      return Lane::DeviceToHost;
    case StreamKind::BulkHostToDevice:
      return Lane::BulkHostToDevice;
    case StreamKind::BulkDeviceToHost:
      return Lane::BulkDeviceToHost;
  }
  return Lane::Compute;
}

// The engine's schedule from what the recorder and the trace saw (see the top of the file).
class EngineReading {
 public:
  EngineReading(const ModelLayout& layout, const Plan& plan, const ScheduleRecorder& recorder,
                const std::vector<TraceSpan>& spans)
      : layout_(layout), entries_(recorder.entries()) {
    // The engine allocates one pinned buffer per offloaded boundary, in layer order.
    size_t k = 0;
    for (const void* buffer : recorder.pinned("offloaded activation")) {
      while (k < plan.activations.size() && !boundary_on_host(plan.activations[k])) ++k;
      boundary_of_[buffer] = static_cast<int32_t>(k++);
    }
    // And one per layer whose internals go to the host, in layer order.
    k = 0;
    for (const void* buffer : recorder.pinned("offloaded layer internals")) {
      while (k < plan.activations.size() && plan.activations[k] != ActivationPlacement::OffloadWithInternals)
        ++k;
      boundary_of_[buffer] = static_cast<int32_t>(k++);
    }
    for (const TraceSpan& span : spans) {
      if (span.track == TraceTrack::CpuUpdate) cpu_spans_.push_back(&span);
      for (int s = 0; s < kStreamCount; ++s)
        if (span.track == stream_track(static_cast<StreamKind>(s))) stream_spans_[s].push_back(&span);
    }
    read_streams();
    read_host();
    read_cpu();
    read_waits();
  }

  StepSchedule schedule;
  std::map<std::string, int> unmodelled;  // the engine's work the program has no task for, by reason

 private:
  struct Item {
    enum Kind { Work, Wait, RingWait, Record };
    Item(Kind k, size_t e) : kind(k), entry(e) {}
    Kind kind;
    size_t entry;                // the recorder's entry that opened it
    int task = -1;               // Work: its task in `schedule` (-1: not modelled)
    std::vector<size_t> copies;  // Work: the copies it issued
  };
  // A span as the program's task (kind, subject), or as work the program does not model.
  struct Named {
    TaskKind kind = TaskKind::HostWait;
    int32_t subject = -1;
    const char* unmodelled = nullptr;
  };

  const ScheduleRecorder::Entry& entry(size_t i) const { return entries_[i]; }

  int unit_named(std::string_view name) const {
    for (size_t u = 0; u < layout_.units.size(); ++u)
      if (layout_.units[u].name == name) return static_cast<int>(u);
    return -1;
  }
  // The unit whose name follows `prefix` in `scope`, or -1.
  int unit_after(std::string_view scope, std::string_view prefix) const {
    return scope.starts_with(prefix) ? unit_named(scope.substr(prefix.size())) : -1;
  }
  // The unit whose name comes before `suffix` in `scope`, or -1.
  int unit_before(std::string_view scope, std::string_view suffix) const {
    return scope.ends_with(suffix) ? unit_named(scope.substr(0, scope.size() - suffix.size())) : -1;
  }
  std::string label(TaskKind kind, int32_t subject) const { return task_label(kind, subject, layout_); }
  static Named not_modelled(const char* reason) { return {TaskKind::HostWait, -1, reason}; }
  int32_t boundary(const void* pinned) const {
    const auto it = boundary_of_.find(pinned);
    EXPECT_NE(it, boundary_of_.end()) << "an activation copy to or from a buffer of no offloaded boundary";
    return it == boundary_of_.end() ? -1 : it->second;
  }

  // The program's task for one span of the engine's work (see the top of the file).
  Named classify(int stream, const TraceSpan& span, const Item& work) const {
    const std::string_view scope = span.scope, op = span.name;
    const ScheduleRecorder::Entry* copy = work.copies.empty() ? nullptr : &entry(work.copies.front());
    if (op == "fill_zero") return not_modelled(kMemsets);
    // A use of a unit: run_use's scope, "<unit> forward", "<unit> recompute" (a forward again in
    // the backward), "<unit> backward" or "<unit> loss" (the head).
    int use = -1;
    bool forward = false;
    if ((use = unit_before(scope, " forward")) >= 0 || (use = unit_before(scope, " recompute")) >= 0)
      forward = true;
    else if ((use = unit_before(scope, " backward")) < 0)
      use = unit_before(scope, " loss");
    int u = -1;
    switch (static_cast<StreamKind>(stream)) {
      case StreamKind::HostToDevice:
        if (scope.empty()) return {TaskKind::TokenUpload, -1};
        if ((u = unit_after(scope, "load ")) >= 0) return {TaskKind::WeightUpload, u};
        if (scope == "reload activation" && copy) return {TaskKind::ActivationReload, boundary(copy->src)};
        if (use >= 0) return {TaskKind::ResidentUpload, use};  // ensure_resident, at the unit's first use
        break;
      case StreamKind::DeviceToHost:
        if (scope.empty()) return {TaskKind::LossReadback, -1};  // the loss, and the device's norm
        if ((u = unit_after(scope, "gradients ")) >= 0) return {TaskKind::GradientDownload, u};
        if (scope == "offload activation" && copy) return {TaskKind::ActivationOffload, boundary(copy->dst)};
        if (use >= 0 && !forward) return {TaskKind::GradientDownload, use};  // a device unit's partials
        break;
      case StreamKind::BulkHostToDevice:
        if (scope == "reload internals" && copy) return {TaskKind::InternalsReload, boundary(copy->src)};
        // A streamed-state unit's piece: its master, m and v up and the AdamW over them.
        if ((u = unit_after(scope, "update ")) >= 0) return {TaskKind::StateUpload, u};
        break;
      case StreamKind::BulkDeviceToHost:
        if (scope == "offload internals" && copy) return {TaskKind::InternalsOffload, boundary(copy->dst)};
        if ((u = unit_after(scope, "update ")) >= 0) return {TaskKind::StateDownload, u};
        break;
      case StreamKind::Compute: {
        if ((u = unit_after(scope, "update ")) >= 0) return {TaskKind::GpuAdamW, u};
        if ((u = unit_after(scope, "gradients ")) >= 0)
          return op == "grad_sumsq_partials" ? Named{TaskKind::GpuGradNorm, u} : not_modelled(kRowGather);
        if (scope.empty() && (op == "grad_norm_accumulate" || op == "clip_coefficient"))
          return not_modelled(kDeviceNormSum);
        if (use < 0) break;
        if (op == "grad_sumsq_partials") return not_modelled(kDeviceNormPartials);
        const UnitKind kind = layout_.units[static_cast<size_t>(use)].kind;
        if (kind == UnitKind::Head) return {TaskKind::Head, use};
        if (kind == UnitKind::Embedding)
          return {forward ? TaskKind::EmbeddingForward : TaskKind::EmbeddingBackward, use};
        return {forward ? TaskKind::LayerForward : TaskKind::LayerBackward, use};
      }
    }
    ADD_FAILURE() << "engine work this test cannot name: " << op << " in scope '" << scope << "' on stream "
                  << stream;
    return not_modelled("work this test cannot name");
  }

  // Each stream's items in issue order; its spans become tasks.
  void read_streams() {
    bool open[kStreamCount] = {};
    for (size_t i = 0; i < entries_.size(); ++i) {
      const auto& e = entry(i);
      if (e.call == ScheduleRecorder::Call::Synchronize) continue;
      auto& items = items_[e.stream];
      switch (e.call) {
        case ScheduleRecorder::Call::Stamp:
          if (!open[e.stream]) items.emplace_back(Item::Work, i);
          open[e.stream] = !open[e.stream];
          break;
        case ScheduleRecorder::Call::Copy:
        case ScheduleRecorder::Call::Fill:
        case ScheduleRecorder::Call::HostTask:
          if (open[e.stream]) {
            if (e.call == ScheduleRecorder::Call::Copy) items.back().copies.push_back(i);
          } else if (e.call == ScheduleRecorder::Call::HostTask) {
            items.emplace_back(Item::RingWait, i);  // UnitUpdater::reserve_gradient_buffer
          } else {
            EXPECT_EQ(e.bytes, 0u) << "work issued outside a traced span on stream " << e.stream;
          }
          break;
        case ScheduleRecorder::Call::Record:
        case ScheduleRecorder::Call::Wait:
          EXPECT_FALSE(open[e.stream]) << "an event inside a traced span";
          items.emplace_back(e.call == ScheduleRecorder::Call::Wait ? Item::Wait : Item::Record, i);
          if (e.call == ScheduleRecorder::Call::Record) record_of_[e.event] = {e.stream, items.size() - 1};
          break;
        case ScheduleRecorder::Call::Synchronize:
          break;
      }
    }
    for (int s = 0; s < kStreamCount; ++s) {
      size_t span = 0;
      int last = -1;  // the stream's last task, while it may go on (no event recorded after it)
      for (Item& item : items_[s]) {
        if (item.kind == Item::Record) last = -1;
        if (item.kind != Item::Work) continue;
        if (span >= stream_spans_[s].size()) {
          ADD_FAILURE() << "more traced work than spans on stream " << s;
          return;
        }
        const Named named = classify(s, *stream_spans_[s][span++], item);
        if (named.unmodelled != nullptr) {
          ++unmodelled[named.unmodelled];
          continue;
        }
        const std::string name = label(named.kind, named.subject);
        if (last < 0 || schedule.label(last) != name) {
          last = schedule.add(stream_lane(s), name);
          first_entry_[last] = item.entry;
          named_[last] = named;
        }
        item.task = last;
      }
      EXPECT_EQ(span, stream_spans_[s].size()) << "spans without traced work on stream " << s;
    }
  }

  void read_host() {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entry(i).call == ScheduleRecorder::Call::Synchronize && entry(i).on_host)
        host_.emplace_back(i, schedule.add(Lane::Host, task_label(TaskKind::HostWait, -1, layout_)));
  }
  // The host's last synchronization before entry i was issued, or -1.
  int host_before(size_t i) const {
    int task = -1;
    for (const auto& [at, t] : host_)
      if (at < i) task = t;
    return task;
  }

  // The tasks whose end the event stands for (see the top of the file).
  std::vector<int> done_at(EventId event) {
    if (const auto known = done_at_.find(event); known != done_at_.end()) return known->second;
    const auto it = record_of_.find(event);
    if (it == record_of_.end()) return {};  // recorded before the first traced step: long done
    const auto [stream, position] = it->second;
    std::vector<int> done;
    const auto& items = items_[stream];
    for (size_t q = position; q-- > 0;) {
      const Item& item = items[q];
      if (item.kind == Item::Work && item.task >= 0) {
        done.push_back(item.task);
        break;
      }
      if (item.kind == Item::Wait)
        for (int t : done_at(entry(item.entry).event)) done.push_back(t);
      if (item.kind == Item::RingWait)
        if (const int from = ring_source(stream, q); from >= 0) done.push_back(from);
    }
    if (const int h = host_before(items[position].entry); h >= 0) done.push_back(h);
    done_at_[event] = done;
    return done;
  }

  // The task the next work after items_[stream][q] belongs to, or -1.
  int next_task(int stream, size_t q) const {
    for (size_t k = q + 1; k < items_[stream].size(); ++k)
      if (items_[stream][k].kind == Item::Work && items_[stream][k].task >= 0) return items_[stream][k].task;
    return -1;
  }

  // The CPU updater's lane: its spans, and a landing at each wait for a gradient.
  void read_cpu() {
    size_t next_span = 0;
    std::vector<EventId> pending;  // waits for an upload (the row-sparse embedding): the next update's
    const auto add_span = [&] {
      const std::string& name = cpu_spans_[next_span++]->name;  // "adamw <unit>[ (which rows)]"
      std::string_view unit = std::string_view(name).substr(std::string_view("adamw ").size());
      unit = unit.substr(0, unit.find(" ("));
      const int task = schedule.add(Lane::Cpu, label(TaskKind::CpuAdamW, unit_named(unit)));
      for (EventId e : pending)
        for (int t : done_at(e)) schedule.wait(t, task);
      pending.clear();
    };
    for (const auto& e : entries_) {
      if (e.call != ScheduleRecorder::Call::Synchronize || e.on_host) continue;
      while (next_span < e.cpu_spans) add_span();
      const auto it = record_of_.find(e.event);
      if (it == record_of_.end() || it->second.first != static_cast<int>(StreamKind::DeviceToHost)) {
        pending.push_back(e.event);
        continue;
      }
      // The gradient (or a device unit's partials) copied down last before the event.
      int copy = -1;
      for (size_t q = it->second.second; q-- > 0 && copy < 0;)
        if (items_[it->second.first][q].kind == Item::Work) copy = items_[it->second.first][q].task;
      const bool after_download = copy >= 0 && named_.at(copy).kind == TaskKind::GradientDownload;
      EXPECT_TRUE(after_download) << "a landing after no gradient download";
      if (!after_download) continue;
      const int task = schedule.add(Lane::Cpu, label(TaskKind::GradientLanded, named_.at(copy).subject));
      landing_of_[copy] = task;
      for (int t : done_at(e.event)) schedule.wait(t, task);
    }
    while (next_span < cpu_spans_.size()) add_span();
    EXPECT_TRUE(pending.empty()) << "a wait of the CPU updater with nothing after it";
  }

  // A wait of the d2h stream for a free ring buffer (items_[stream][q]): for the CPU update of the
  // gradient that last landed in the buffer the next copy writes.
  int ring_source(int stream, size_t q) const {
    const void* buffer = nullptr;
    for (size_t k = q + 1; k < items_[stream].size() && buffer == nullptr; ++k)
      if (items_[stream][k].kind == Item::Work && !items_[stream][k].copies.empty())
        buffer = entry(items_[stream][k].copies.front()).dst;
    for (size_t k = q; k-- > 0;) {
      const Item& item = items_[stream][k];
      if (item.kind != Item::Work || item.copies.empty() || entry(item.copies.front()).dst != buffer)
        continue;
      const auto landing = landing_of_.find(item.task);
      if (landing == landing_of_.end()) break;
      const std::string update = label(TaskKind::CpuAdamW, named_.at(item.task).subject);
      const auto& cpu = schedule.lane(Lane::Cpu);
      for (size_t p = static_cast<size_t>(schedule.position(landing->second)) + 1; p < cpu.size(); ++p)
        if (schedule.label(cpu[p]) == update) return cpu[p];
      break;
    }
    ADD_FAILURE() << "a wait for a ring buffer whose previous gradient's update the test cannot find";
    return -1;
  }

  // Stream waits, host waits, and every task after the host's last synchronization.
  void read_waits() {
    for (int s = 0; s < kStreamCount; ++s) {
      const auto& items = items_[s];
      for (size_t q = 0; q < items.size(); ++q) {
        const int to = next_task(s, q);
        if (to < 0) continue;
        if (items[q].kind == Item::Wait)
          for (int t : done_at(entry(items[q].entry).event)) schedule.wait(t, to);
        if (items[q].kind == Item::RingWait)
          if (const int from = ring_source(s, q); from >= 0) schedule.wait(from, to);
      }
    }
    for (const auto& [at, task] : host_)
      for (int t : done_at(entry(at).event)) schedule.wait(t, task);
    for (const auto& [task, at] : first_entry_)
      if (const int h = host_before(at); h >= 0) schedule.wait(h, task);
    std::map<size_t, int> issued(host_.begin(), host_.end());
    for (const auto& [task, at] : first_entry_) issued[at] = task;
    for (const auto& [at, task] : issued) schedule.issued(task);
  }

  const ModelLayout& layout_;
  const std::vector<ScheduleRecorder::Entry> entries_;
  std::map<const void*, int32_t> boundary_of_;  // offloaded boundaries' pinned buffers
  std::vector<const TraceSpan*> stream_spans_[kStreamCount], cpu_spans_;
  std::vector<Item> items_[kStreamCount];
  std::map<EventId, std::pair<int, size_t>> record_of_;  // event -> (stream, item)
  std::map<int, size_t> first_entry_;                    // device task -> the entry that issued it
  std::vector<std::pair<size_t, int>> host_;             // host waits: (entry, task)
  std::map<int, int> landing_of_;                        // gradient download task -> its landing
  std::map<int, Named> named_;                           // device task -> its kind and subject
  std::map<EventId, std::vector<int>> done_at_;          // done_at's answers so far
};

}  // namespace ferry::test
