// SimDevice: stream order, events across streams, memory accounting and its error text, errors of
// host tasks carried to synchronize, concurrent copy streams, bandwidth and latency emulation.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"
#include "device/device.h"
#include "device/sim_device.h"
#include "test_util.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<Device> sim(size_t capacity = size_t{1} << 30) {
  SimDeviceOptions options;
  options.memory_capacity = capacity;
  return make_sim_device(options);
}

std::string error_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no ferry::Error)";
}

TEST(SimDevice, RunsTasksOfAStreamInIssueOrder) {
  auto device = sim();
  std::vector<int> seen;  // only the compute stream's thread touches it until synchronize
  for (int i = 0; i < 1000; ++i) device->host_task(StreamKind::Compute, [&seen, i] { seen.push_back(i); });
  device->synchronize_all();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], i);
}

TEST(SimDevice, WaitOrdersWorkAcrossStreams) {
  auto device = sim();
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> copied{false};
    bool saw_copy = false;
    device->host_task(StreamKind::HostToDevice, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(round == 0 ? 30 : 1));
      copied = true;
    });
    const EventId landed = device->record(StreamKind::HostToDevice);
    device->wait(StreamKind::Compute, landed);
    device->host_task(StreamKind::Compute, [&] { saw_copy = copied.load(); });
    device->synchronize_all();
    EXPECT_TRUE(saw_copy) << "round " << round;
  }
}

TEST(SimDevice, SynchronizeOnAnEventWaitsOnlyForWorkBeforeIt) {
  auto device = sim();
  std::atomic<int> stage{0};
  device->host_task(StreamKind::Compute, [&] { stage = 1; });
  const EventId first = device->record(StreamKind::Compute);
  std::atomic<bool> release{false};
  device->host_task(StreamKind::Compute, [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stage = 2;
  });
  device->synchronize(first);  // would hang if it waited for the second task
  EXPECT_EQ(stage.load(), 1);
  release = true;
  device->synchronize_all();
  EXPECT_EQ(stage.load(), 2);
  // An event that completed long ago: waiting for it is a no-op.
  device->wait(StreamKind::DeviceToHost, first);
  device->synchronize(first);
}

TEST(SimDevice, RefusesAllocationsPastTheCapacityWithTheNumbers) {
  auto device = sim(1000);
  DeviceBuffer a(*device, 600, "first slot");
  const std::string text = error_text([&] { DeviceBuffer b(*device, 500, "second slot"); });
  EXPECT_NE(
      text.find("[sim device] out of memory: asked for 500 bytes while 600 bytes of 1000 bytes are in use "
                "(what=second slot)"),
      std::string::npos)
      << text;
  // A refused allocation leaves the accounting as it was, and what fits still fits.
  EXPECT_EQ(device->memory().in_use, 600u);
  DeviceBuffer c(*device, 400, "third");
  EXPECT_EQ(device->memory().in_use, 1000u);
}

TEST(SimDevice, ErrorTextUsesReadableUnits) {
  SimDeviceOptions options;
  options.memory_capacity = size_t{3} << 20;
  auto device = make_sim_device(options);
  DeviceBuffer a(*device, size_t{2} << 20, "layers");
  const std::string text = error_text([&] { DeviceBuffer b(*device, size_t{3} << 19, "workspace"); });
  EXPECT_NE(text.find("asked for 1.50 MiB while 2.00 MiB of 3.00 MiB are in use (what=workspace)"),
            std::string::npos)
      << text;
}

TEST(SimDevice, CountsBytesInUseAndThePeak) {
  auto device = sim(1 << 20);
  EXPECT_EQ(device->memory().capacity, size_t{1} << 20);
  // A budget is this device's; one opened without it would get the default.
  EXPECT_EQ(device->uncapped_memory(), SimDeviceOptions{}.memory_capacity);
  {
    DeviceBuffer a(*device, 1000, "a");
    DeviceBuffer b(*device, 3000, "b");
    EXPECT_EQ(device->memory().in_use, 4000u);
    a.reset();
    DeviceBuffer c(*device, 500, "c");
    EXPECT_EQ(device->memory().in_use, 3500u);
    EXPECT_EQ(device->memory().peak, 4000u);
  }
  EXPECT_EQ(device->memory().in_use, 0u);
  EXPECT_EQ(device->memory().peak, 4000u);
  // Pinned memory is counted separately.
  PinnedBuffer p(*device, 12345, "staging");
  EXPECT_EQ(device->pinned_memory().in_use, 12345u);
  EXPECT_EQ(device->memory().in_use, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data()) % 64, 0u);
}

TEST(SimDevice, FreshDeviceMemoryReadsAsNaN) {
  auto device = sim();
  DeviceBuffer d(*device, 64 * sizeof(float), "fresh");
  PinnedBuffer h(*device, 64 * sizeof(float), "host");
  device->copy_to_host(h.data(), d.data(), d.bytes(), StreamKind::DeviceToHost);
  device->synchronize_all();
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(h.as<float>()[i]));
}

TEST(SimDevice, CopiesAndFillsMoveTheBytes) {
  auto device = sim();
  const size_t n = 1000;
  const auto values = test::random_vector(n, 3);
  PinnedBuffer in(*device, n * 4, "in"), out(*device, n * 4, "out");
  std::memcpy(in.data(), values.data(), n * 4);
  DeviceBuffer a(*device, n * 4, "a"), b(*device, n * 4, "b");
  device->copy_to_device(a.data(), in.data(), n * 4, StreamKind::HostToDevice);
  device->wait(StreamKind::Compute, device->record(StreamKind::HostToDevice));
  device->copy_on_device(b.data(), a.data(), n * 4, StreamKind::Compute);
  device->fill_zero(b.as<float>() + 10, 5 * 4, StreamKind::Compute);
  device->wait(StreamKind::DeviceToHost, device->record(StreamKind::Compute));
  device->copy_to_host(out.data(), b.data(), n * 4, StreamKind::DeviceToHost);
  device->synchronize_all();
  for (size_t i = 0; i < n; ++i) {
    const float expected = (i >= 10 && i < 15) ? 0.0f : values[i];
    ASSERT_EQ(out.as<float>()[i], expected) << i;
  }
}

TEST(SimDevice, ChecksThatCopiesStayInsideAllocations) {
  auto device = sim();
  DeviceBuffer d(*device, 256, "slot");
  PinnedBuffer p(*device, 256, "staging");
  std::vector<char> pageable(256);
  EXPECT_NE(error_text([&] {
              device->copy_to_device(d.data(), p.data(), 257, StreamKind::HostToDevice);
            }).find("copy_to_device: the destination (257 bytes"),
            std::string::npos);
  EXPECT_NE(error_text([&] {
              device->copy_to_device(d.as<char>() + 128, p.data(), 129, StreamKind::HostToDevice);
            }).find("not inside one allocation"),
            std::string::npos);
  EXPECT_NE(error_text([&] {
              device->copy_to_host(pageable.data(), d.data(), 16, StreamKind::DeviceToHost);
            }).find("not inside pinned memory"),
            std::string::npos);
  EXPECT_NE(error_text([&] {
              device->fill_zero(pageable.data(), 16, StreamKind::Compute);
            }).find("fill_zero: the destination"),
            std::string::npos);
  // Interior ranges are fine, and pageable host memory is accepted when the option allows it.
  device->copy_to_device(d.as<char>() + 128, p.as<char>() + 100, 128, StreamKind::HostToDevice);
  SimDeviceOptions relaxed;
  relaxed.require_pinned_host = false;
  auto lenient = make_sim_device(relaxed);
  DeviceBuffer e(*lenient, 256, "slot");
  lenient->copy_to_host(pageable.data(), e.data(), 256, StreamKind::DeviceToHost);
  lenient->synchronize_all();
  device->synchronize_all();
}

// Memory allocated elsewhere becomes copyable once registered, is counted with the pinned memory
// while it is, and is neither freed by the device nor copyable after the registration ends.
TEST(SimDevice, RegisteredHostMemoryIsPinnedUntilTheRegistrationEnds) {
  auto device = make_sim_device({});
  std::vector<float> host(1000, 2.5f), back(1000, 0.0f);
  DeviceBuffer d(*device, 4000, "slot");
  {
    PinnedRegistration up(*device, host.data(), 4000, "masters");
    PinnedRegistration down(*device, back.data(), 4000, "readback");
    EXPECT_EQ(device->pinned_memory().in_use, 8000u);
    device->copy_to_device(d.data(), host.data(), 4000, StreamKind::HostToDevice);
    device->wait(StreamKind::DeviceToHost, device->record(StreamKind::HostToDevice));
    device->copy_to_host(back.data(), d.data(), 4000, StreamKind::DeviceToHost);
    device->synchronize_all();
    EXPECT_EQ(back[999], 2.5f);
  }
  EXPECT_EQ(device->pinned_memory().in_use, 0u);
  EXPECT_NE(error_text([&] {
              device->copy_to_device(d.data(), host.data(), 4000, StreamKind::HostToDevice);
            }).find("not inside pinned memory"),
            std::string::npos);
  // A device destroyed while memory is still registered leaves that memory alone (not its to free).
  auto other = make_sim_device({});
  other->register_pinned(host.data(), 4000, "never unregistered");
  other.reset();
  EXPECT_EQ(host[0], 2.5f);
}

TEST(SimDevice, RethrowsAnErrorOfAHostTaskAtTheNextSynchronize) {
  auto device = sim();
  std::atomic<int> ran{0};
  device->host_task(StreamKind::Compute, [] { raise("test", "boom in a host task"); });
  device->host_task(StreamKind::Compute, [&] { ++ran; });  // the stream goes on
  const EventId after = device->record(StreamKind::Compute);
  EXPECT_EQ(error_text([&] { device->synchronize(after); }), "[test] boom in a host task");
  EXPECT_EQ(ran.load(), 1);
  device->synchronize_all();  // collected once, not again

  // Any exception type, from any stream, reaches synchronize_all with its type.
  device->host_task(StreamKind::DeviceToHost, [] { throw 42; });
  device->host_task(StreamKind::HostToDevice, [] { throw std::runtime_error("second"); });
  int thrown = 0;
  try {
    device->synchronize_all();
  } catch (int value) {
    thrown = value;
  } catch (const std::runtime_error& e) {
    thrown = std::string(e.what()) == "second" ? 2 : -1;
  }
  EXPECT_TRUE(thrown == 42 || thrown == 2);
  device->synchronize_all();
}

TEST(SimDevice, DestructorRunsEveryQueuedTask) {
  std::atomic<int> done{0};
  {
    auto device = sim();
    for (int i = 0; i < 50; ++i) {
      device->host_task(static_cast<StreamKind>(i % kStreamCount), [&] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++done;
      });
    }
    // An uncollected error is reported at destruction, not thrown from the destructor.
    device->host_task(StreamKind::Compute, [] { raise("test", "never collected"); });
  }
  EXPECT_EQ(done.load(), 50);
}

// A copy waits out latency + bytes / rate of its direction on its own stream, and its bytes land
// after the wait. The waits asked for are exact; the default wait, a sleep, lasts at least that.
TEST(SimDevice, EmulatesBandwidthAndLatency) {
  std::mutex mutex;
  std::vector<double> h2d_waits, d2h_waits;
  bool landed_early = false;
  const size_t bytes = 5'000'000;
  SimDeviceOptions options;
  options.h2d_bytes_per_second = 100e6;
  options.d2h_bytes_per_second = 50e6;
  options.copy_latency_seconds = 0.005;
  unsigned char* target = nullptr;  // the first h2d copy's destination, fresh device memory (0xFF)
  options.copy_wait = [&](StreamKind stream, double seconds) {
    std::lock_guard<std::mutex> lock(mutex);
    if (stream == StreamKind::HostToDevice && h2d_waits.empty()) landed_early = target[0] != 0xFF;
    (stream == StreamKind::HostToDevice ? h2d_waits : d2h_waits).push_back(seconds);
  };
  auto device = make_sim_device(options);
  PinnedBuffer host(*device, bytes, "host"), readback(*device, bytes, "readback");
  DeviceBuffer dev(*device, bytes, "dev"), other(*device, bytes, "other");
  std::memset(host.data(), 7, bytes);
  target = dev.as<unsigned char>();
  device->copy_to_device(dev.data(), host.data(), bytes, StreamKind::HostToDevice);
  device->copy_to_host(readback.data(), other.data(), bytes, StreamKind::DeviceToHost);
  device->copy_to_device(dev.data(), host.data(), 64, StreamKind::HostToDevice);
  device->synchronize_all();
  EXPECT_EQ(h2d_waits, (std::vector<double>{0.005 + bytes / 100e6, 0.005 + 64 / 100e6}));
  EXPECT_EQ(d2h_waits, std::vector<double>{0.005 + bytes / 50e6});
  EXPECT_FALSE(landed_early) << "the bytes land after the modelled time";
  EXPECT_EQ(dev.as<unsigned char>()[bytes - 1], 7);

  SimDeviceOptions slow;
  slow.copy_latency_seconds = 0.005;
  auto sleeping = make_sim_device(slow);
  PinnedBuffer h(*sleeping, 64, "h");
  DeviceBuffer d(*sleeping, 64, "d");
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) sleeping->copy_to_device(d.data(), h.data(), 64, StreamKind::HostToDevice);
  sleeping->synchronize_all();
  EXPECT_GE(seconds_since(start), 0.050);
}

// h2d and d2h are streams of their own: a copy on each waits out its modelled time at the same
// moment. Each wait below returns once both copies are waiting; copies that ran one after the
// other would never meet, and the test fails after the guard's minute instead of hanging.
TEST(SimDevice, CopyStreamsRunConcurrently) {
  std::mutex mutex;
  std::condition_variable both;
  int waiting = 0;
  std::vector<bool> met;
  SimDeviceOptions options;
  options.h2d_bytes_per_second = 50e6;
  options.d2h_bytes_per_second = 50e6;
  options.copy_wait = [&](StreamKind, double) {
    std::unique_lock<std::mutex> lock(mutex);
    ++waiting;
    both.notify_all();
    met.push_back(both.wait_for(lock, std::chrono::minutes(1), [&] { return waiting == 2; }));
  };
  auto device = make_sim_device(options);
  const size_t bytes = 5'000'000;
  PinnedBuffer up(*device, bytes, "up"), down(*device, bytes, "down");
  DeviceBuffer a(*device, bytes, "a"), b(*device, bytes, "b");
  std::memset(up.data(), 7, bytes);
  device->fill_zero(b.data(), bytes, StreamKind::DeviceToHost);
  device->synchronize_all();
  device->copy_to_device(a.data(), up.data(), bytes, StreamKind::HostToDevice);
  device->copy_to_host(down.data(), b.data(), bytes, StreamKind::DeviceToHost);
  device->synchronize_all();
  EXPECT_EQ(met, (std::vector<bool>{true, true})) << "h2d and d2h ran one after the other";
  EXPECT_EQ(down.as<unsigned char>()[bytes - 1], 0);
  EXPECT_EQ(a.as<unsigned char>()[bytes - 1], 7);
}

TEST(SimDeviceDeathTest, HostTasksMustNotCallBackIntoTheDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto device = sim();
        Device* d = device.get();
        device->host_task(StreamKind::Compute, [d] { d->record(StreamKind::Compute); });
        device->synchronize_all();
      },
      "host task");
}

}  // namespace
}  // namespace ferry
