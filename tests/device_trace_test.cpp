// The timeline trace below the engine: the idle and busy numbers over synthetic spans, SimDevice's
// stamps against the host clock, the recorder's windows (work outside a traced step is not
// recorded; host spans straddling a window are clipped to it), and the Chrome trace JSON.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/log.h"
#include "device/device.h"
#include "device/trace/step_activity.h"
#include "device/trace/trace_json.h"
#include "device/trace/trace_scope.h"
#include "device/trace/tracer.h"
#include "device/trace/tracing_device.h"
#include "test_util.h"

namespace ferry {
namespace {

TraceSpan span(TraceTrack track, double begin, double end, std::string scope = {}) {
  return {track, "work", std::move(scope), begin, end, -1, {}};
}

TEST(StepActivity, IdleIsTheShareOfTheWindowWithNothingOnTheComputeStream) {
  const std::vector<TraceSpan> spans = {
      span(TraceTrack::Compute, 1, 3),       span(TraceTrack::Compute, 2, 4),  // overlapping: counted once
      span(TraceTrack::Compute, 6, 9),       span(TraceTrack::HostToDevice, 0, 5),
      span(TraceTrack::DeviceToHost, 8, 12),  // clipped to the window
      span(TraceTrack::CpuUpdate, -3, 1),    span(TraceTrack::CpuUpdate, 4, 5),
      span(TraceTrack::Host, 0, 10),  // the host track counts for nothing
  };
  const StepActivity a = measure_step(SpanStore::of(spans), 3, 0.0, 10.0);
  EXPECT_EQ(a.step, 3);
  EXPECT_DOUBLE_EQ(a.wall(), 10.0);
  EXPECT_DOUBLE_EQ(a.compute_idle, 0.4);         // covered [1,4] and [6,9]: 6 of 10
  EXPECT_DOUBLE_EQ(a.compute_idle_inner, 0.25);  // between 1 and 9: 2 of 8 idle
  EXPECT_DOUBLE_EQ(a.h2d_busy, 0.5);
  EXPECT_DOUBLE_EQ(a.d2h_busy, 0.2);
  EXPECT_DOUBLE_EQ(a.cpu_update_busy, 0.2);
  EXPECT_EQ(describe(a),
            "step 3: GPU idle 40.0% of 10000.0 ms (25.0% between its first and last kernel); h2d busy 50%, "
            "d2h 20%, cpu update 20%");
}

TEST(StepActivity, EdgesNestingAndEmptyTracks) {
  EXPECT_DOUBLE_EQ(
      covered_seconds(SpanStore::of({span(TraceTrack::Compute, 0, 10), span(TraceTrack::Compute, 2, 3)}),
                      TraceTrack::Compute, 0, 10),
      10.0);  // a span inside another adds nothing
  EXPECT_DOUBLE_EQ(
      covered_seconds(SpanStore::of({span(TraceTrack::Compute, 0, 1), span(TraceTrack::Compute, 1, 2)}),
                      TraceTrack::Compute, 0, 2),
      2.0);  // spans that touch
  const StepActivity idle = measure_step(SpanStore::of({span(TraceTrack::HostToDevice, 0, 1)}), 1, 0.0, 2.0);
  EXPECT_DOUBLE_EQ(idle.compute_idle, 1.0);
  EXPECT_DOUBLE_EQ(idle.compute_idle_inner, 0.0);
  const StepActivity outside = measure_step(SpanStore::of({span(TraceTrack::Compute, 5, 6)}), 1, 0.0, 2.0);
  EXPECT_DOUBLE_EQ(outside.compute_idle, 1.0);
  const StepActivity full = measure_step(SpanStore::of({span(TraceTrack::Compute, -1, 3)}), 1, 0.0, 2.0);
  EXPECT_DOUBLE_EQ(full.compute_idle, 0.0);
  EXPECT_DOUBLE_EQ(full.compute_idle_inner, 0.0);
}

TEST(ChromeTrace, TracksStepsAndScopeParents) {
  const double t0 = 100.0;
  std::vector<TraceSpan> spans = {
      {TraceTrack::Compute, "linear_forward", "layer.0 forward", t0 + 0.001, t0 + 0.002, -1, {}},
      {TraceTrack::Compute, "swiglu_forward", "layer.0 forward", t0 + 0.002, t0 + 0.003, -1, {}},
      {TraceTrack::Compute, "linear_forward", "layer.1 forward", t0 + 0.004, t0 + 0.005, -1, {}},
      {TraceTrack::HostToDevice, "copy_to_device", "", t0 + 0.0, t0 + 0.004, 4096, {}},
  };
  const SpanStore store = SpanStore::of(spans);
  StepActivity a = measure_step(store, 7, t0, t0 + 0.006);
  std::string text;
  write_chrome_trace(store, {a}, "sim", [&text](std::string_view piece) { text += piece; });
  const nlohmann::json trace = nlohmann::json::parse(text);
  int metadata = 0, parents = 0, leaves = 0, steps = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      ++metadata;
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    EXPECT_GE(e["ts"].get<double>(), -1e-9);
    if (e["cat"] == "scope") {
      ++parents;
      EXPECT_EQ(e["tid"], static_cast<int>(TraceTrack::Compute) + 1);
    } else if (e["cat"] == "step") {
      ++steps;
      EXPECT_EQ(e["name"], "step 7");
      EXPECT_NEAR(e["dur"].get<double>(), 6000.0, 1e-6);
    } else {
      ++leaves;
    }
  }
  EXPECT_EQ(metadata, 1 + 2 * kTraceTrackCount);
  EXPECT_EQ(parents, 2);  // layer.0 forward (two ops), layer.1 forward; the copy has no scope
  EXPECT_EQ(leaves, 4);
  EXPECT_EQ(steps, 1);
  // The first parent is written before the ops it holds and spans them exactly.
  const auto& events = trace["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    // Metadata events have no category: a const json's operator[] must not be asked for it.
    if (events[i].value("cat", "") != "scope" || events[i]["name"] != "layer.0 forward") continue;
    EXPECT_NEAR(events[i]["ts"].get<double>(), 1000.0, 1e-6);
    EXPECT_NEAR(events[i]["dur"].get<double>(), 2000.0, 1e-6);
    EXPECT_EQ(events[i + 1]["name"], "linear_forward");
    EXPECT_EQ(events[i + 1]["args"]["scope"], "layer.0 forward");
  }
  EXPECT_EQ(trace["otherData"]["steps"][0]["step"], 7);
  EXPECT_NEAR(trace["otherData"]["steps"][0]["gpu_idle_percent"].get<double>(), 50.0, 1e-9);
}

TEST(SimDeviceStamps, FollowStreamOrderOnTheHostClock) {
  auto device = make_sim_device({});
  const double before = steady_seconds();
  const StampId a = device->record_stamp(StreamKind::Compute);
  double inside = 0.0;
  device->host_task(StreamKind::Compute, [&inside] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inside = steady_seconds();
  });
  const StampId b = device->record_stamp(StreamKind::Compute);
  const StampId other = device->record_stamp(StreamKind::DeviceToHost);  // another stream runs meanwhile
  const double tb = device->take_stamp(b);
  const double ta = device->take_stamp(a);  // any order
  const double after = steady_seconds();
  EXPECT_LE(before, ta);
  EXPECT_LE(ta + 0.02, inside + 1e-9);
  EXPECT_LE(inside, tb);
  EXPECT_LE(tb, after);
  const double t_other = device->take_stamp(other);  // unordered with the compute stream's
  EXPECT_LE(before, t_other);
  EXPECT_LE(t_other, steady_seconds());
}

// Traces one step of a small schedule on the simulated device: a slow upload, a fill and a host
// task on the compute stream that waits for it, a read-back, and CPU work that began before the
// step and ends after it.
TEST(Tracer, RecordsTheTracedStepOnly) {
  test::ScratchDir dir("trace");
  SimDeviceOptions options;
  options.h2d_bytes_per_second = 1e8;  // 1 MiB: ~10 ms
  auto sim = make_sim_device(options);
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Warn);
  Tracer tracer(*sim, dir / "out" / "trace.json", {2});
  TracingDevice device(*sim, tracer);
  ASSERT_EQ(device.tracer(), &tracer);
  const size_t bytes = size_t{1} << 20;
  PinnedBuffer host(device, bytes, "host");
  DeviceBuffer buffer(device, bytes, "buffer");

  auto run_step = [&](int64_t step) {
    if (tracer.wants(step)) tracer.begin_step(step);
    {
      const TraceScope scope(device, "load", "layer.0");
      device.copy_to_device(buffer.data(), host.data(), bytes, StreamKind::HostToDevice);
    }
    device.wait(StreamKind::Compute, device.record(StreamKind::HostToDevice));
    {
      const TraceScope scope(device, "layer.0", "forward");
      device.fill_zero(buffer.data(), 64, StreamKind::Compute);
      tracer.device_work(StreamKind::Compute, "kernel", -1, [&] {
        device.host_task(StreamKind::Compute,
                         [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
      });
    }
    device.wait(StreamKind::DeviceToHost, device.record(StreamKind::Compute));
    device.copy_to_host(host.data(), buffer.data(), 4096, StreamKind::DeviceToHost);
    device.synchronize(device.record(StreamKind::DeviceToHost));
    if (tracer.recording()) tracer.end_step();
  };

  run_step(1);
  EXPECT_TRUE(tracer.spans().empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "trace.json"));

  // CPU work that starts before step 2 and ends after it, on another thread.
  std::atomic<bool> started{false}, release{false};
  std::thread cpu([&] {
    const HostSpan work(device, TraceTrack::CpuUpdate, "adamw", "layer.0");
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run_step(2);
  release = true;
  cpu.join();
  run_step(3);
  set_log_level(saved);

  const std::vector<StepActivity> steps = tracer.steps();
  ASSERT_EQ(steps.size(), 1u);
  const StepActivity& a = steps[0];
  EXPECT_EQ(a.step, 2);
  const std::vector<TraceSpan> spans = tracer.spans();
  std::map<std::string, TraceSpan> by_name;
  for (const TraceSpan& s : spans) {
    EXPECT_LE(a.begin, s.begin) << s.name;
    EXPECT_LE(s.begin, s.end) << s.name;
    EXPECT_LE(s.end, a.end) << s.name;
    by_name[s.name] = s;
  }
  ASSERT_EQ(by_name.count("copy_to_device"), 1u);
  EXPECT_EQ(by_name["copy_to_device"].track, TraceTrack::HostToDevice);
  EXPECT_EQ(by_name["copy_to_device"].scope, "load layer.0");
  EXPECT_EQ(by_name["copy_to_device"].bytes, static_cast<int64_t>(bytes));
  EXPECT_GE(by_name["copy_to_device"].end - by_name["copy_to_device"].begin, 0.009);
  EXPECT_EQ(by_name["fill_zero"].track, TraceTrack::Compute);
  EXPECT_EQ(by_name["fill_zero"].scope, "layer.0 forward");
  EXPECT_EQ(by_name["kernel"].track, TraceTrack::Compute);
  EXPECT_GE(by_name["kernel"].end - by_name["kernel"].begin, 0.005);
  EXPECT_GE(by_name["kernel"].begin, by_name["copy_to_device"].end);  // the compute stream waited
  EXPECT_EQ(by_name["copy_to_host"].track, TraceTrack::DeviceToHost);
  EXPECT_EQ(by_name["copy_to_host"].scope, "");
  EXPECT_EQ(by_name["layer.0 forward"].track, TraceTrack::Host);
  EXPECT_EQ(by_name["synchronize"].track, TraceTrack::Host);
  // The CPU work covers the whole window, clipped to it, once: closing after the window added nothing.
  EXPECT_EQ(
      std::count_if(spans.begin(), spans.end(), [](const TraceSpan& s) { return s.name == "adamw layer.0"; }),
      1);
  EXPECT_EQ(by_name["adamw layer.0"].track, TraceTrack::CpuUpdate);
  EXPECT_DOUBLE_EQ(by_name["adamw layer.0"].begin, a.begin);
  EXPECT_DOUBLE_EQ(by_name["adamw layer.0"].end, a.end);
  EXPECT_DOUBLE_EQ(a.cpu_update_busy, 1.0);
  // The shares follow from the spans, whatever their lengths came out on this machine: the upload
  // kept h2d busy; the compute stream had nothing to do before the upload landed, and the kernel
  // kept it busy after.
  const double window = a.end - a.begin;
  const TraceSpan& upload = by_name["copy_to_device"];
  const TraceSpan& kernel = by_name["kernel"];
  EXPECT_GE(a.h2d_busy, (upload.end - upload.begin) / window - 1e-12);
  EXPECT_GE(a.compute_idle, (upload.end - a.begin) / window - 1e-12);
  EXPECT_LE(a.compute_idle, 1.0 - (kernel.end - kernel.begin) / window + 1e-12);
  EXPECT_GT(a.compute_idle, 0.0);
  EXPECT_LT(a.compute_idle, 1.0);

  std::ifstream in(dir / "out" / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(in);
  EXPECT_EQ(trace["otherData"]["steps"].size(), 1u);
  EXPECT_EQ(trace["otherData"]["steps"][0]["step"], 2);
  EXPECT_EQ(trace["otherData"]["device"], "sim");
}

TEST(SpanStore, HoldsEachStringOnceAndGivesTheSpansBack) {
  std::vector<TraceSpan> spans;
  for (int i = 0; i < 10000; ++i)
    spans.push_back(
        {i % 2 ? TraceTrack::Compute : TraceTrack::HostToDevice, i % 2 ? "linear_forward" : "copy_to_device",
         "layer." + std::to_string(i % 32) + " forward of the sequence tile", static_cast<double>(i), i + 0.5,
         i % 2 ? -1 : i, i % 2 ? "x (65536, 4096), w (14336, 4096) in bf16" : ""});
  SpanStore store = SpanStore::of(spans);
  ASSERT_EQ(store.size(), spans.size());
  const std::vector<TraceSpan> back = store.expanded();
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(back[i].track, spans[i].track);
    EXPECT_EQ(back[i].name, spans[i].name);
    EXPECT_EQ(back[i].scope, spans[i].scope);
    EXPECT_EQ(back[i].detail, spans[i].detail);
    EXPECT_EQ(back[i].begin, spans[i].begin);
    EXPECT_EQ(back[i].end, spans[i].end);
    EXPECT_EQ(back[i].bytes, spans[i].bytes);
  }
  // 40 bytes a span in chunks of 4,096 (3 chunks), and 36 distinct strings: far below the
  // strings' ~100 bytes a span.
  EXPECT_GE(store.bytes(), 10000 * 40u);
  EXPECT_LE(store.bytes(), 3 * 4096 * 40u + 36 * 256u);
  // The third chunk has room; new strings are counted at most 3 * 1,136 bytes.
  EXPECT_LE(store.bytes_with(12288 - 10000), store.bytes() + 3 * 1136 + 64 * 8);
  EXPECT_GE(store.bytes_with(12288 - 10000 + 1), store.bytes() + 4096 * 40u);
  store.set_times(7, 1.0, 2.0);
  EXPECT_EQ(store[7].begin, 1.0);
  EXPECT_EQ(store[7].end, 2.0);
  EXPECT_EQ(store[7].name, "linear_forward");
}

// A step of `ops` fills on the compute stream, traced when the tracer wants it.
void run_fill_step(Tracer& tracer, Device& device, void* buffer, int64_t step, int ops) {
  if (tracer.wants(step) && !tracer.begin_step(step)) return;
  {
    const TraceScope scope(device, "layer.0", "forward");
    for (int i = 0; i < ops; ++i) device.fill_zero(buffer, 64, StreamKind::Compute);
  }
  device.synchronize(device.record(StreamKind::Compute));
  if (tracer.recording()) tracer.end_step();
}

TEST(Tracer, HoldsNoMoreThanItsHostBytesAndDropsWhatWouldNot) {
  test::ScratchDir dir("trace-bytes");
  auto sim = make_sim_device({});
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Error);
  // How much one step of 200 fills holds, from a trace with room to spare.
  size_t one_step = 0, all = 0;
  {
    Tracer roomy(*sim, dir / "roomy.json", {1});
    TracingDevice device(*sim, roomy);
    DeviceBuffer buffer(device, 64, "buffer");
    run_fill_step(roomy, device, buffer.data(), 1, 200);
    all = roomy.spans().size();  // the fills, the scope and the host's wait
    EXPECT_GE(all, 202u);
    EXPECT_EQ(roomy.dropped(), 0u);
    one_step = roomy.held_bytes();
  }
  // Room for that step and not for a second as large: step 2 is not traced.
  {
    Tracer tracer(*sim, dir / "two.json", {1, 2}, one_step + 4096);
    TracingDevice device(*sim, tracer);
    DeviceBuffer buffer(device, 64, "buffer");
    run_fill_step(tracer, device, buffer.data(), 1, 200);
    EXPECT_EQ(tracer.dropped(), 0u);
    EXPECT_FALSE(tracer.begin_step(2));
    EXPECT_FALSE(tracer.recording());
    run_fill_step(tracer, device, buffer.data(), 3, 200);
    ASSERT_EQ(tracer.steps().size(), 1u);
    EXPECT_LE(tracer.held_bytes(), one_step + 4096);
  }
  // Room for half the step: the rest is dropped, and the file still holds what was kept.
  {
    const size_t half = one_step - 100 * (24 + 2 * 256);
    Tracer tracer(*sim, dir / "half.json", {1}, half);
    TracingDevice device(*sim, tracer);
    DeviceBuffer buffer(device, 64, "buffer");
    run_fill_step(tracer, device, buffer.data(), 1, 200);
    EXPECT_GT(tracer.dropped(), 80u);
    EXPECT_LT(tracer.dropped(), 120u);
    EXPECT_LE(tracer.held_bytes(), half);
    ASSERT_EQ(tracer.steps().size(), 1u);
    EXPECT_EQ(tracer.spans().size() + tracer.dropped(), all);
    size_t kept = 0;
    for (const TraceSpan& span : tracer.spans()) kept += span.name == "fill_zero";
    std::ifstream in(dir / "half.json");
    const nlohmann::json trace = nlohmann::json::parse(in);
    size_t written = 0;
    for (const auto& e : trace["traceEvents"]) written += e.value("name", "") == "fill_zero";
    EXPECT_EQ(written, kept);
    EXPECT_GT(kept, 90u);
  }
  set_log_level(saved);
}

}  // namespace
}  // namespace ferry
