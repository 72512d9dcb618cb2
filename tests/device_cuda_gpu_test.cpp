// CudaDevice on a real GPU: the memory budget and its error text, copies and fills through the
// three streams ordered by events, host tasks and their errors, the event pool under many records,
// and h2d/d2h overlap. Skipped where no GPU is present.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "device/device.h"
#include "test_util.h"

namespace ferry {
namespace {

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMiB = size_t{1} << 20;

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU here"

std::string error_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no ferry::Error)";
}

TEST(CudaDevice, EnforcesTheMemoryBudgetWithTheNumbers) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 24 * kGiB);
  std::printf("device: %s\n", device->name().c_str());
  EXPECT_EQ(device->memory().capacity, 24 * kGiB);
  // The card's free memory, which a device opened without the budget would get (another device of
  // the same process finds as much free, less what this one's streams hold).
  const size_t uncapped = make_cuda_device(0, 0)->memory().capacity;
  EXPECT_GE(device->uncapped_memory(), uncapped);
  EXPECT_LE(device->uncapped_memory(), uncapped + 256 * kMiB);
  DeviceBuffer a(*device, 20 * kGiB, "layer slots");
  const std::string text = error_text([&] { DeviceBuffer b(*device, 8 * kGiB, "workspace"); });
  EXPECT_NE(
      text.find(
          "[cuda device 0] out of GPU memory: asked for 8.00 GiB while 20.00 GiB of 24.00 GiB are in use "
          "(what=workspace)"),
      std::string::npos)
      << text;
  {
    DeviceBuffer c(*device, 4 * kGiB, "fits");
    EXPECT_EQ(device->memory().in_use, 24 * kGiB);
  }
  a.reset();
  EXPECT_EQ(device->memory().in_use, 0u);
  EXPECT_EQ(device->memory().peak, 24 * kGiB);
}

TEST(CudaDevice, DefaultCapacityIsTheCardsFreeMemory) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 0);
  EXPECT_GT(device->memory().capacity, 1 * kGiB);
  EXPECT_NE(error_text([] { make_cuda_device(99, 0); }).find("there is no GPU 99"), std::string::npos);
}

TEST(CudaDevice, CopiesAndFillsThroughTheStreamsInEventOrder) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 4 * kGiB);
  const size_t n = (size_t{1} << 24) + 3;  // 64 MiB of floats, an odd count
  const auto values = test::random_vector(n, 5);
  PinnedBuffer in(*device, n * 4, "in"), out(*device, n * 4, "out");
  EXPECT_EQ(device->pinned_memory().in_use, 2 * n * 4);
  std::memcpy(in.data(), values.data(), n * 4);
  DeviceBuffer a(*device, n * 4, "a"), b(*device, n * 4, "b");
  device->copy_to_device(a.data(), in.data(), n * 4, StreamKind::HostToDevice);
  device->wait(StreamKind::Compute, device->record(StreamKind::HostToDevice));
  device->copy_on_device(b.data(), a.data(), n * 4, StreamKind::Compute);
  device->fill_zero(b.as<float>() + 100, 50 * 4, StreamKind::Compute);
  device->wait(StreamKind::DeviceToHost, device->record(StreamKind::Compute));
  device->copy_to_host(out.data(), b.data(), n * 4, StreamKind::DeviceToHost);
  // A host task after the copy sees its result.
  std::atomic<float> seen{-1.0f};
  float* out_data = out.as<float>();
  device->host_task(StreamKind::DeviceToHost, [&seen, out_data, n] { seen = out_data[n - 1]; });
  const EventId done = device->record(StreamKind::DeviceToHost);
  device->synchronize(done);
  EXPECT_EQ(seen.load(), values[n - 1]);
  for (size_t i = 0; i < n; ++i) {
    const float expected = (i >= 100 && i < 150) ? 0.0f : values[i];
    ASSERT_EQ(out.as<float>()[i], expected) << i;
  }
  // Copies must stay inside device allocations.
  EXPECT_NE(error_text([&] {
              device->copy_to_device(a.data(), in.data(), n * 4 + 1, StreamKind::HostToDevice);
            }).find("not inside one allocation"),
            std::string::npos);
}

// Memory allocated elsewhere (a huge-page mapping of optimizer state) is page-locked in place,
// counted with the pinned memory, and copied asynchronously; unregistering gives the count back.
TEST(CudaDevice, RegisteredHostMemoryCopiesLikePinnedMemory) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 1 * kGiB);
  const size_t n = (size_t{3} << 20) + 5;
  std::vector<float> values = test::random_vector(n, 11);
  std::vector<float> host(values), back(n, 0.0f);
  device->register_pinned(host.data(), n * 4, "registered");
  device->register_pinned(back.data(), n * 4, "registered readback");
  EXPECT_EQ(device->pinned_memory().in_use, 2 * n * 4);
  DeviceBuffer d(*device, n * 4, "d");
  device->copy_to_device(d.data(), host.data(), n * 4, StreamKind::HostToDevice);
  device->wait(StreamKind::DeviceToHost, device->record(StreamKind::HostToDevice));
  device->copy_to_host(back.data(), d.data(), n * 4, StreamKind::DeviceToHost);
  device->synchronize(device->record(StreamKind::DeviceToHost));
  EXPECT_EQ(0, std::memcmp(back.data(), values.data(), n * 4));
  device->unregister_pinned(host.data());
  device->unregister_pinned(back.data());
  EXPECT_EQ(device->pinned_memory().in_use, 0u);
}

TEST(CudaDevice, HostTaskErrorsReachTheNextSynchronize) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 1 * kGiB);
  std::atomic<int> ran{0};
  device->host_task(StreamKind::Compute, [] { raise("test", "boom in a host task"); });
  device->host_task(StreamKind::Compute, [&] { ++ran; });
  EXPECT_EQ(error_text([&] { device->synchronize_all(); }), "[test] boom in a host task");
  EXPECT_EQ(ran.load(), 1);
  device->synchronize_all();  // collected once
  device->host_task(StreamKind::HostToDevice, [] { throw 7; });
  const EventId e = device->record(StreamKind::HostToDevice);
  EXPECT_THROW(device->synchronize(e), int);
}

TEST(CudaDevice, EventPoolSurvivesManyRecords) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 1 * kGiB);
  EXPECT_NE(device->native_stream(StreamKind::Compute), nullptr);
  EXPECT_NE(device->native_stream(StreamKind::Compute), device->native_stream(StreamKind::HostToDevice));
  EXPECT_NE(device->native_stream(StreamKind::HostToDevice), device->native_stream(StreamKind::DeviceToHost));
  DeviceBuffer d(*device, 1 << 20, "d");
  std::vector<EventId> events;
  for (int i = 0; i < 20000; ++i) {
    const StreamKind s = static_cast<StreamKind>(i % kStreamCount);
    device->fill_zero(d.data(), 4096, s);
    events.push_back(device->record(s));
    device->wait(static_cast<StreamKind>((i + 1) % kStreamCount), events.back());
    if (i % 1000 == 999) device->synchronize(events[i - 500]);
  }
  for (EventId e : {events.front(), events[12345], events.back()}) {
    device->wait(StreamKind::Compute, e);  // old ids are complete, not reused meanings
    device->synchronize(e);
  }
  device->synchronize_all();
}

TEST(CudaDevice, CopyStreamsOverlap) {
  REQUIRE_GPU();
  auto device = make_cuda_device(0, 8 * kGiB);
  const size_t bytes = size_t{1} << 30;
  PinnedBuffer up(*device, bytes, "up"), down(*device, bytes, "down");
  std::memset(up.data(), 1, bytes);
  DeviceBuffer a(*device, bytes, "a"), b(*device, bytes, "b");
  device->fill_zero(b.data(), bytes, StreamKind::Compute);
  device->synchronize_all();
  using Clock = std::chrono::steady_clock;
  auto time = [&](bool h2d, bool d2h) {
    const auto start = Clock::now();
    if (h2d) device->copy_to_device(a.data(), up.data(), bytes, StreamKind::HostToDevice);
    if (d2h) device->copy_to_host(down.data(), b.data(), bytes, StreamKind::DeviceToHost);
    device->synchronize_all();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  time(true, true);  // warm up
  const double t_up = time(true, false), t_down = time(false, true), t_both = time(true, true);
  std::printf("1 GiB pinned copies: h2d %.1f GB/s, d2h %.1f GB/s, both at once %.1f GB/s\n",
              bytes / t_up / 1e9, bytes / t_down / 1e9, 2 * bytes / t_both / 1e9);
  EXPECT_LT(t_both, 0.85 * (t_up + t_down)) << "h2d and d2h did not overlap";
}

}  // namespace
}  // namespace ferry
