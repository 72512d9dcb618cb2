// The stream simulator on graphs small enough to time by hand: FIFO lanes, dependencies, the
// copy latency, the shared PCIe link, and the binding predecessors the critical path follows.
#include <gtest/gtest.h>

#include "planner/stream_simulator.h"

namespace ferry {
namespace {

CopyRates link(double alone, double duplex, double latency = 0.0) {
  return {alone, alone, duplex, duplex, latency};
}

TEST(StreamSimulator, LanesRunInOrderAndInParallel) {
  TaskGraph g;
  const int32_t a = g.add(Lane::Compute, TaskKind::LayerForward, 2.0, 0.0, {});
  const int32_t b = g.add(Lane::Compute, TaskKind::LayerForward, 3.0, 0.0, {});
  const int32_t c = g.add(Lane::Cpu, TaskKind::CpuAdamW, 4.0, 0.0, {});
  const auto t = simulate(g, link(1.0, 1.0));
  EXPECT_DOUBLE_EQ(t[a].start, 0.0);
  EXPECT_DOUBLE_EQ(t[a].end, 2.0);
  EXPECT_DOUBLE_EQ(t[b].start, 2.0);  // FIFO behind a
  EXPECT_DOUBLE_EQ(t[b].end, 5.0);
  EXPECT_EQ(t[b].binding, a);
  EXPECT_DOUBLE_EQ(t[c].end, 4.0);  // another lane, at the same time
  EXPECT_EQ(t[c].binding, -1);
}

TEST(StreamSimulator, DependenciesAndTheBindingOne) {
  TaskGraph g;
  const int32_t upload = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 300.0, {});  // 3 s at 100 B/s
  const int32_t update = g.add(Lane::Cpu, TaskKind::CpuAdamW, 1.0, 0.0, {});
  const int32_t deps[] = {upload, update};
  const int32_t compute = g.add(Lane::Compute, TaskKind::LayerForward, 2.0, 0.0, deps);
  const auto t = simulate(g, link(100.0, 100.0));
  EXPECT_DOUBLE_EQ(t[compute].start, 3.0);
  EXPECT_DOUBLE_EQ(t[compute].end, 5.0);
  EXPECT_EQ(t[compute].binding, upload);  // the upload finished last
}

TEST(StreamSimulator, HostWaitsTakeNoTimeButBlock) {
  TaskGraph g;
  const int32_t update = g.add(Lane::Cpu, TaskKind::CpuAdamW, 1.5, 0.0, {});
  const int32_t wait[] = {update};
  const int32_t host = g.add(Lane::Host, TaskKind::HostWait, 0.0, 0.0, wait);
  const int32_t after[] = {host};
  const int32_t load = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 100.0, after);
  const auto t = simulate(g, link(100.0, 100.0));
  EXPECT_DOUBLE_EQ(t[host].start, 1.5);
  EXPECT_DOUBLE_EQ(t[host].end, 1.5);
  EXPECT_DOUBLE_EQ(t[load].end, 2.5);
}

TEST(StreamSimulator, CopiesPayTheLatencyThenMoveBytes) {
  TaskGraph g;
  const int32_t a = g.add(Lane::DeviceToHost, TaskKind::GradientDownload, 0.0, 50.0, {});
  const auto t = simulate(g, link(100.0, 100.0, 0.25));
  EXPECT_DOUBLE_EQ(t[a].end, 0.75);  // 0.25 s latency + 50 B at 100 B/s
}

// Both directions at once share the link: 100 B/s alone, 60 B/s each in duplex. h2d moves 100 B,
// d2h 40 B. Together for 40/60 = 0.667 s (d2h done, h2d has moved 40 B), then h2d alone: 60 B at
// 100 B/s = 0.6 s, so h2d ends at 1.267 s instead of 1 s.
TEST(StreamSimulator, DuplexCopiesRunAtTheSharedRate) {
  TaskGraph g;
  const int32_t up = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 100.0, {});
  const int32_t down = g.add(Lane::DeviceToHost, TaskKind::GradientDownload, 0.0, 40.0, {});
  const auto t = simulate(g, link(100.0, 60.0));
  EXPECT_NEAR(t[down].end, 40.0 / 60.0, 1e-12);
  EXPECT_NEAR(t[up].end, 40.0 / 60.0 + 0.6, 1e-12);
}

// Two copies of one direction, on its two lanes, take its copy engine in turn: 100 B of internals
// down from t = 0, then a 40 B gradient, ready at 0.1 s, waits until 1 s and ends at 1.4 s -- the
// internals copy is what released it.
TEST(StreamSimulator, TheTwoLanesOfOneDirectionTakeItsEngineInTurn) {
  TaskGraph g;
  const int32_t internals = g.add(Lane::BulkDeviceToHost, TaskKind::InternalsOffload, 0.0, 100.0, {});
  const int32_t compute = g.add(Lane::Compute, TaskKind::LayerForward, 0.1, 0.0, {});
  const int32_t gradient = g.add(Lane::DeviceToHost, TaskKind::GradientDownload, 0.0, 40.0, {{compute}});
  const auto t = simulate(g, link(100.0, 60.0));
  EXPECT_NEAR(t[internals].end, 1.0, 1e-12);
  EXPECT_NEAR(t[gradient].start, 1.0, 1e-12);
  EXPECT_NEAR(t[gradient].end, 1.4, 1e-12);
  EXPECT_EQ(t[gradient].binding, internals);
}

// Host DRAM shared: a copy (100 B at 100 B/s alone) beside 1 s of CPU work. While both run the copy
// moves 80 B/s and the CPU does half a second of work per second: the copy ends at 1.25 s, by when
// the CPU has done 0.625 s of its work; the rest runs alone, to 1.625 s.
TEST(StreamSimulator, ACopyAndTheCpuSlowEachOtherWhileBothRun) {
  TaskGraph g;
  const int32_t up = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 100.0, {});
  const int32_t adamw = g.add(Lane::Cpu, TaskKind::CpuAdamW, 1.0, 0.0, {});
  HostMemorySharing sharing;
  sharing.cpu_beside_copy = 0.5;
  sharing.copy_beside_cpu = 0.8;
  const auto t = simulate(g, link(100.0, 50.0), sharing);
  EXPECT_NEAR(t[up].end, 1.25, 1e-12);
  EXPECT_NEAR(t[adamw].end, 1.625, 1e-12);
  // Without sharing, each runs as alone.
  const auto alone = simulate(g, link(100.0, 50.0));
  EXPECT_DOUBLE_EQ(alone[up].end, 1.0);
  EXPECT_DOUBLE_EQ(alone[adamw].end, 1.0);
}

// Both directions beside the CPU: 50 B/s each in duplex, 0.6 of it beside the CPU (30 B/s); the
// CPU's 0.3 s of work at 0.5 speed ends at 0.6 s, when each copy has moved 18 B; the other 82 B
// move at 50 B/s, to 0.6 + 1.64 s.
TEST(StreamSimulator, DuplexCopiesBesideTheCpuUseTheDuplexShares) {
  TaskGraph g;
  const int32_t up = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 100.0, {});
  const int32_t down = g.add(Lane::DeviceToHost, TaskKind::GradientDownload, 0.0, 100.0, {});
  const int32_t adamw = g.add(Lane::Cpu, TaskKind::CpuAdamW, 0.3, 0.0, {});
  HostMemorySharing sharing{0.9, 0.5, 0.95, 0.6};
  const auto t = simulate(g, link(100.0, 50.0), sharing);
  EXPECT_NEAR(t[adamw].end, 0.6, 1e-12);
  EXPECT_NEAR(t[up].end, 0.6 + 82.0 / 50.0, 1e-12);
  EXPECT_NEAR(t[down].end, 0.6 + 82.0 / 50.0, 1e-12);
}

// A copy still in its latency moves no bytes, so the CPU beside it runs at full speed.
TEST(StreamSimulator, ACopysLatencyDoesNotSlowTheCpu) {
  TaskGraph g;
  const int32_t up = g.add(Lane::HostToDevice, TaskKind::WeightUpload, 0.0, 100.0, {});
  const int32_t adamw = g.add(Lane::Cpu, TaskKind::CpuAdamW, 0.5, 0.0, {});
  HostMemorySharing sharing{0.5, 0.5, 0.5, 0.5};
  const auto t = simulate(g, link(100.0, 50.0, 1.0), sharing);
  EXPECT_NEAR(t[adamw].end, 0.5, 1e-12);
  EXPECT_NEAR(t[up].end, 2.0, 1e-12);  // 1 s latency, then 100 B alone
}

TEST(StreamSimulator, ADependencyOnALaterTaskIsABug) {
  TaskGraph g;
  const int32_t ahead[] = {5};
  EXPECT_DEATH(g.add(Lane::Compute, TaskKind::Head, 1.0, 0.0, ahead), "before it");
}

}  // namespace
}  // namespace ferry
