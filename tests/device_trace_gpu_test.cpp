// Timeline stamps on a real GPU: they follow stream order, agree with the host's steady clock
// (a host task's own clock reading lies between the stamps around it), stay consistent across
// re-anchoring, time a large copy at a plausible PCIe rate, and feed the recorder. Skipped where
// no GPU is present.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "device/trace/trace_scope.h"
#include "device/trace/tracer.h"
#include "device/trace/tracing_device.h"
#include "test_util.h"

namespace ferry {
namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU here"

constexpr size_t kMiB = size_t{1} << 20;
// The anchor ties the GPU clock to the host's within microseconds; allow for scheduling noise.
constexpr double kTolerance = 200e-6;

TEST(CudaStamps, FollowStreamOrderOnTheHostClock) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 4 * (size_t{1} << 30));
  for (int round = 0; round < 3; ++round) {  // each round re-anchors: no stamp is outstanding
    const double before = steady_seconds();
    const StampId a = device->record_stamp(StreamKind::Compute);
    double inside = 0.0;
    device->host_task(StreamKind::Compute, [&inside] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      inside = steady_seconds();
    });
    const StampId b = device->record_stamp(StreamKind::Compute);
    const double tb = device->take_stamp(b);
    const double ta = device->take_stamp(a);
    const double after = steady_seconds();
    std::printf(
        "round %d: stamp a %.1f us after the host's record, b %.1f us after the host task's reading\n", round,
        (ta - before) * 1e6, (tb - inside) * 1e6);
    EXPECT_GE(ta, before - kTolerance);
    EXPECT_GE(inside, ta + 0.02 - kTolerance);
    EXPECT_GE(tb, inside - kTolerance);
    EXPECT_LE(tb, after + kTolerance);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TEST(CudaStamps, ManyStampsAreMonotonePerStream) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 4 * (size_t{1} << 30));
  DeviceBuffer buffer(*device, 16 * kMiB, "buffer");
  std::vector<StampId> stamps;
  for (int i = 0; i < 20000; ++i) {  // more than one pool's worth, handles reused after take
    stamps.push_back(device->record_stamp(StreamKind::Compute));
    device->fill_zero(buffer.data(), (i % 16 + 1) * kMiB, StreamKind::Compute);
  }
  double previous = 0.0;
  for (size_t i = 0; i < stamps.size(); ++i) {
    const double t = device->take_stamp(stamps[i]);
    ASSERT_GE(t, previous) << "stamp " << i;
    previous = t;
  }
  for (int i = 0; i < 100; ++i) device->take_stamp(device->record_stamp(StreamKind::HostToDevice));
}

TEST(CudaStamps, TimeALargeCopyAtAPlausibleRate) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 4 * (size_t{1} << 30));
  const size_t bytes = 512 * kMiB;
  PinnedBuffer host(*device, bytes, "host");
  DeviceBuffer buffer(*device, bytes, "buffer");
  device->copy_to_device(buffer.data(), host.data(), bytes, StreamKind::HostToDevice);  // warm-up
  const StampId a = device->record_stamp(StreamKind::HostToDevice);
  device->copy_to_device(buffer.data(), host.data(), bytes, StreamKind::HostToDevice);
  const StampId b = device->record_stamp(StreamKind::HostToDevice);
  const double seconds = device->take_stamp(b) - device->take_stamp(a);
  const double rate = static_cast<double>(bytes) / seconds / 1e9;
  std::printf("h2d of 512 MiB: %.3f ms, %.1f GB/s\n", seconds * 1e3, rate);
  EXPECT_GT(rate, 5.0);
  EXPECT_LT(rate, 80.0);  // PCIe Gen5 x16 tops out near 64 GB/s
}

TEST(CudaStamps, FeedTheRecorder) {
  REQUIRE_GPU();
  test::ScratchDir dir("gpu-trace");
  auto cuda = make_cuda_device(0, 4 * (size_t{1} << 30));
  Tracer tracer(*cuda, dir / "trace.json", {1});
  TracingDevice device(*cuda, tracer);
  const size_t bytes = 256 * kMiB;
  PinnedBuffer host(device, bytes, "host");
  DeviceBuffer buffer(device, bytes, "buffer");
  tracer.begin_step(1);
  {
    const TraceScope scope(device, "load", "layer.0");
    device.copy_to_device(buffer.data(), host.data(), bytes, StreamKind::HostToDevice);
  }
  device.wait(StreamKind::Compute, device.record(StreamKind::HostToDevice));
  device.fill_zero(buffer.data(), bytes, StreamKind::Compute);
  device.wait(StreamKind::DeviceToHost, device.record(StreamKind::Compute));
  device.copy_to_host(host.data(), buffer.data(), bytes, StreamKind::DeviceToHost);
  device.synchronize(device.record(StreamKind::DeviceToHost));
  const StepActivity a = tracer.end_step();
  std::printf("%s\n", describe(a).c_str());
  int device_spans = 0;
  double last_end = a.begin;
  for (const TraceSpan& s : tracer.spans()) {
    EXPECT_GE(s.begin, a.begin - kTolerance) << s.name;
    EXPECT_LE(s.end, a.end + kTolerance) << s.name;
    if (s.track == TraceTrack::Host) continue;
    ++device_spans;
    EXPECT_GE(s.begin, last_end - kTolerance) << s.name << ": the three ran one after another";
    last_end = s.end;
  }
  EXPECT_EQ(device_spans, 3);
  EXPECT_GT(a.h2d_busy, 0.2);
  EXPECT_TRUE(std::filesystem::exists(dir / "trace.json"));
}

}  // namespace
}  // namespace ferry
