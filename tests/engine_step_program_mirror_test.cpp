// planner/step_program.cpp mirrors SlidingEngine::step and the UnitUpdater's worker so that the
// cost model can simulate a step; this test holds the mirror to the engine. For a handful of plans
// the engine runs three steps on the simulated device, traced (TracingDevice, TracingOps,
// TracingAdamW) over a ScheduleRecorder, and build_step_program builds the same three steps. Both
// are read into a StepSchedule (tests/step_schedule.h) and must be equal: the same tasks in the
// same order on every lane, issued by the host in the same order, with the same happens-before
// order between the lanes.
//
// Reading the engine. Each span of a stream's track is one piece of the engine's work, named by
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
//
// Not compared: the host thread's waits for the CPU updater (before uploading a unit it updates,
// and for the step's gradient norm). The engine waits on a condition variable the device does not
// see, so the program's host waits for CPU tasks are left out (program_schedule). What the host
// issues between them is compared (the issue order).
//
// Drift. The engine does work the program has no task for; the program leaves out memsets on
// purpose (step_program.h), the rest is drift, expected here plan by plan so that it stays in view:
//   * kDeviceNormPartials: a unit updated on the device gets its gradient-norm partials computed
//     on the compute stream after its backward (DeviceOptimizer::gradient_done: its gradient read
//     once more), which the program charges for host units (GpuGradNorm) but not for these;
//   * kDeviceNormSum: every unit on the device: the partials' sum and the clip coefficient
//     (DeviceOptimizer::update_all: a memset, an accumulate per unit, a clip kernel);
//   * kClipUpload: device units beside host units, clipped: the clip coefficient's 4-byte upload
//     on the compute stream before their updates (DeviceOptimizer::update_with_norm);
//   * kRowGather: the row-sparse embedding's gather of its token rows' gradients on the compute
//     stream before they go down (SlidingEngine::send_gradients).
// Apart from these the two agree on every plan below.
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "device/tracing_device.h"
#include "engine/model_init.h"
#include "engine/sliding_engine.h"
#include "ops/device_ops.h"
#include "planner/nominal_profile.h"
#include "planner/step_program.h"
#include "schedule_recorder.h"
#include "sliding_plans.h"
#include "step_schedule.h"
#include "test_util.h"

namespace ferry {
namespace {

using test::ScheduleRecorder;
using test::StepSchedule;
using test::task_label;

constexpr int kMirrorSteps = 3;

constexpr const char* kMemsets = "memsets";
constexpr const char* kDeviceNormPartials = "device units' norm partials";
constexpr const char* kDeviceNormSum = "device norm sum and clip coefficient";
constexpr const char* kClipUpload = "clip coefficient upload";
constexpr const char* kRowGather = "embedding row gather";

Lane stream_lane(int stream) {
  switch (static_cast<StreamKind>(stream)) {
    case StreamKind::Compute:
      return Lane::Compute;
    case StreamKind::HostToDevice:
      return Lane::HostToDevice;
    case StreamKind::DeviceToHost:
      return Lane::DeviceToHost;
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
      while (k < plan.activations.size() && plan.activations[k] != ActivationPlacement::OffloadToHost) ++k;
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
    // A use of a unit: run_use's scope, "<unit> forward", "<unit> backward" or "<unit> loss" (the head).
    int use = -1;
    bool forward = false;
    if ((use = unit_before(scope, " forward")) >= 0)
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
      case StreamKind::Compute: {
        if ((u = unit_after(scope, "update ")) >= 0) return {TaskKind::GpuAdamW, u};
        if ((u = unit_after(scope, "gradients ")) >= 0)
          return op == "grad_sumsq_partials" ? Named{TaskKind::GpuGradNorm, u} : not_modelled(kRowGather);
        if (scope.empty() && (op == "grad_norm_accumulate" || op == "clip_coefficient"))
          return not_modelled(kDeviceNormSum);
        if (scope.empty() && op == "copy_to_device") return not_modelled(kClipUpload);
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

struct MirrorCase {
  std::string name;
  Plan plan;
  double max_grad_norm;
  std::set<std::string> drift;  // the engine's unmodelled work this plan shows (see the top)
};

class StepProgramMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nlohmann::json json = preset_config("qwen3", "tiny").raw;
    json["num_hidden_layers"] = 4;
    config_ = parse_model_config(json, "test");
    layout_ = build_model_layout(config_);
    rows_ = test::make_rows(config_.vocab_size, 5);
  }

  // The engine's three steps, read as a schedule; `drift` gets the kinds of work it did that the
  // program has no task for.
  StepSchedule engine_schedule(const Plan& plan, double max_grad_norm, std::set<std::string>* drift) {
    auto sim = make_sim_device({});
    ScheduleRecorder recorder(*sim);
    Tracer tracer(recorder, scratch_ / "trace.json", {1});
    TracingDevice device(recorder, tracer);
    auto ops = make_device_ops(device);
    SlidingEngine engine(config_, layout_, device, *ops, plan, test::kMicro * test::kSeq,
                         test::kGlobal / test::kMicro, false);
    std::vector<std::vector<float>> weights;
    init_random_weights(config_, 9, weights);
    for (size_t u = 0; u < weights.size(); ++u) engine.host().unit(u).master.assign(weights[u]);
    engine.weights_changed(0);
    const LogLevel saved = log_level();
    set_log_level(LogLevel::Warn);
    // One trace window over every step, open until the last CPU update is done, so that no span
    // of any lane is cut.
    recorder.start(tracer);
    tracer.begin_step(1);
    for (int64_t s = 0; s < kMirrorSteps; ++s)
      engine.step(s + 1, test::batch_for(rows_, s), test::hyper_at(s), max_grad_norm);
    engine.host().wait_all_updated(kMirrorSteps);
    recorder.stop();
    tracer.end_step();
    set_log_level(saved);
    EngineReading reading(layout_, plan, recorder, tracer.spans());
    for (const auto& [reason, count] : reading.unmodelled)
      if (reason != kMemsets) drift->insert(reason);
    return std::move(reading.schedule);
  }

  StepSchedule program_schedule(const Plan& plan) const {
    const StepShape shape{test::kMicro * test::kSeq, test::kGlobal / test::kMicro};
    const StepProgram program = build_step_program(
        config_, layout_, plan, nominal_profile(config_, test::kSeq, DType::F32), shape, kMirrorSteps);
    return test::program_schedule(program.graph, layout_);
  }

  void check(const MirrorCase& c) {
    SCOPED_TRACE(c.name + ": " + c.plan.describe());
    std::set<std::string> drift;
    const StepSchedule engine = engine_schedule(c.plan, c.max_grad_norm, &drift);
    const StepSchedule program = program_schedule(c.plan);
    EXPECT_TRUE(test::same_schedule(engine, program));
    EXPECT_EQ(drift, c.drift) << "the engine's work the program does not model";
  }

  ModelConfig config_;
  ModelLayout layout_;
  std::vector<PackedRow> rows_;
  test::ScratchDir scratch_{"mirror"};
};

TEST_F(StepProgramMirrorTest, StreamedAndOffloadedUnits) {
  using test::make_plan;
  check({"two slots, everything streamed",
         make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward),
         0.5,
         {kRowGather}});
  check({"one slot, boundaries 0 and 2 offloaded",
         make_plan(layout_, 4, 1, {}, {0, 2}, UpdateSchedule::AfterBackward),
         0.5,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, ResidentUnitsAndKeptInternals) {
  check({"resident embedding, layer 2 and head; offloaded boundaries; layer 2 keeps its internals",
         test::keeping_internals(
             test::make_plan(layout_, 4, 3, {0, 3, 5}, {0, 1}, UpdateSchedule::AfterBackward), {2}),
         0.5,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, UpdatesDuringTheBackward) {
  check({"updates during the backward",
         test::make_plan(layout_, 4, 2, {2}, {3}, UpdateSchedule::DuringBackward),
         0.0,
         {kRowGather}});
}

TEST_F(StepProgramMirrorTest, MastersConvertedOnUpload) {
  // Without clipping the layers' gradients take turns in a ring of three buffers: four layers
  // wrap it every step, so the d2h stream waits for the CPU.
  check(
      {"converted on upload, gradient ring",
       test::converting_on_upload(test::make_plan(layout_, 4, 2, {}, {1, 3}, UpdateSchedule::DuringBackward)),
       0.0,
       {kRowGather}});
  check(
      {"converted on upload, clipped, a resident layer",
       test::converting_on_upload(test::make_plan(layout_, 4, 2, {4}, {0, 2}, UpdateSchedule::AfterBackward)),
       0.5,
       {kRowGather}});
}

TEST_F(StepProgramMirrorTest, OptimizerOnTheDevice) {
  check({"layer 1 and the head updated on the device, clipped",
         test::make_plan(layout_, 4, 2, {3}, {0, 2}, UpdateSchedule::AfterBackward, {2, 5}),
         0.5,
         {kRowGather, kDeviceNormPartials, kClipUpload}});
  check({"the embedding and layer 2 updated on the device during the backward",
         test::make_plan(layout_, 4, 2, {1}, {3}, UpdateSchedule::DuringBackward, {0, 3}),
         0.0,
         {kDeviceNormPartials}});
  check({"every unit on the device",
         test::make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::AfterBackward, test::all_units(layout_)),
         0.5,
         {kDeviceNormPartials, kDeviceNormSum}});
  check({"every unit on the device, unclipped, updates during the backward",
         test::make_plan(layout_, 4, 2, {}, {}, UpdateSchedule::DuringBackward, test::all_units(layout_)),
         0.0,
         {kDeviceNormPartials, kDeviceNormSum}});
}

// The tied table is used by the first unit and the last: resident, and the head's gradient lands
// in the embedding's buffer.
TEST_F(StepProgramMirrorTest, TiedEmbeddings) {
  nlohmann::json json = preset_config("llama", "tiny").raw;
  json["tie_word_embeddings"] = true;
  config_ = parse_model_config(json, "test");
  layout_ = build_model_layout(config_);
  rows_ = test::make_rows(config_.vocab_size, 6);
  ASSERT_EQ(config_.num_layers, 2);
  check({"tied table resident, head streamed",
         test::make_plan(layout_, 2, 2, {0}, {1}, UpdateSchedule::AfterBackward),
         1.0,
         {}});
  check({"tied table and head updated on the device",
         test::make_plan(layout_, 2, 2, {}, {}, UpdateSchedule::AfterBackward, {0, 3}),
         1.0,
         {kDeviceNormPartials, kClipUpload}});
}

}  // namespace
}  // namespace ferry
