// ThreadCollective: several SimDevices of one process summing, scattering and gathering as NCCL
// would, deterministically, and failing loudly where NCCL would hang.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "device/sim_device.h"
#include "device/thread_collective.h"

namespace ferry {
namespace {

struct Ranks {
  explicit Ranks(int n, std::chrono::milliseconds timeout = std::chrono::minutes(1)) : comm(n, timeout) {
    for (int r = 0; r < n; ++r) {
      devices.push_back(std::make_unique<SimDevice>(SimDeviceOptions{}));
      handles.push_back(comm.join(r, *devices.back()));
    }
  }
  void* upload(int r, const std::vector<float>& v) {
    void* p = devices[r]->allocate(v.size() * 4, "test");
    std::memcpy(p, v.data(), v.size() * 4);  // simulated device memory is host memory
    return p;
  }
  void sync_all() {
    for (auto& d : devices) d->synchronize_all();
  }
  ThreadCommunicator comm;
  std::vector<std::unique_ptr<SimDevice>> devices;
  std::vector<std::unique_ptr<Collective>> handles;
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
  return v;
}

TEST(ThreadCollective, AllReduceIsTheSequentialSumInRankOrder) {
  for (int n : {1, 2, 3, 4}) {
    Ranks ranks(n);
    const size_t count = 1000;
    std::vector<std::vector<float>> in;
    std::vector<void*> buf;
    for (int r = 0; r < n; ++r) {
      in.push_back(random_values(count, 7 + r));
      buf.push_back(ranks.upload(r, in.back()));
    }
    for (int r = 0; r < n; ++r)
      ranks.handles[r]->all_reduce(buf[r], buf[r], count, DType::F32, StreamKind::Compute);
    ranks.sync_all();
    for (size_t i = 0; i < count; ++i) {
      float expected = 0.0f;
      for (int r = 0; r < n; ++r) expected += in[r][i];
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(static_cast<float*>(buf[r])[i], expected)
            << "rank " << r << " element " << i << " of " << n;
    }
  }
}

TEST(ThreadCollective, ReduceScatterThenAllGatherEqualsAllReduceInBf16) {
  const int n = 4;
  const size_t shard = 257, count = shard * n;
  Ranks ranks(n);
  std::vector<std::vector<uint16_t>> in(n);
  std::vector<void*> send, recv, gathered;
  for (int r = 0; r < n; ++r) {
    for (float x : random_values(count, 100 + r)) in[r].push_back(f32_to_bf16(x));
    send.push_back(ranks.devices[r]->allocate(count * 2, "send"));
    std::memcpy(send[r], in[r].data(), count * 2);
    recv.push_back(ranks.devices[r]->allocate(shard * 2, "shard"));
    gathered.push_back(ranks.devices[r]->allocate(count * 2, "gathered"));
  }
  for (int r = 0; r < n; ++r) {
    ranks.handles[r]->reduce_scatter(send[r], recv[r], shard, DType::BF16, StreamKind::Compute);
    ranks.handles[r]->all_gather(recv[r], gathered[r], shard, DType::BF16, StreamKind::Compute);
  }
  ranks.sync_all();
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;  // summed in fp32 in rank order, rounded to bf16 once
    for (int r = 0; r < n; ++r) sum += bf16_to_f32(in[r][i]);
    const uint16_t expected = f32_to_bf16(sum);
    for (int r = 0; r < n; ++r) ASSERT_EQ(static_cast<uint16_t*>(gathered[r])[i], expected) << r << " " << i;
  }
}

TEST(ThreadCollective, BroadcastCopiesTheRootsBuffer) {
  Ranks ranks(3);
  std::vector<void*> buf;
  for (int r = 0; r < 3; ++r) buf.push_back(ranks.upload(r, random_values(64, 50 + r)));
  const std::vector<float> root(static_cast<float*>(buf[2]), static_cast<float*>(buf[2]) + 64);
  for (int r = 0; r < 3; ++r)
    ranks.handles[r]->broadcast(buf[r], 64, DType::F32, 2, StreamKind::HostToDevice);
  ranks.sync_all();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(0, std::memcmp(buf[r], root.data(), 64 * 4)) << r;
}

TEST(ThreadCollective, ResultsDoNotDependOnTiming) {
  // The same sums with the ranks' streams delayed differently each run give the same bits.
  const int n = 3;
  const size_t count = 4096;
  std::vector<float> first;
  for (int trial = 0; trial < 4; ++trial) {
    Ranks ranks(n);
    std::vector<void*> buf;
    for (int r = 0; r < n; ++r) buf.push_back(ranks.upload(r, random_values(count, 9 + r)));
    for (int r = 0; r < n; ++r) {
      const int delay_ms = (trial + r) % n;
      ranks.devices[r]->host_task(StreamKind::Compute, [delay_ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      });
      ranks.handles[r]->all_reduce(buf[r], buf[r], count, DType::F32, StreamKind::Compute);
    }
    ranks.sync_all();
    std::vector<float> got(static_cast<float*>(buf[0]), static_cast<float*>(buf[0]) + count);
    if (trial == 0)
      first = got;
    else
      ASSERT_EQ(0, std::memcmp(first.data(), got.data(), count * 4)) << "trial " << trial;
  }
}

TEST(ThreadCollective, MismatchedCallsFailOnEveryRankNamingBoth) {
  Ranks ranks(2);
  void* a = ranks.upload(0, random_values(8, 1));
  void* b = ranks.upload(1, random_values(8, 2));
  ranks.handles[0]->all_reduce(a, a, 8, DType::F32, StreamKind::Compute);
  ranks.handles[1]->all_reduce(b, b, 4, DType::F32, StreamKind::Compute);
  for (int r = 0; r < 2; ++r) {
    try {
      ranks.devices[r]->synchronize_all();
      FAIL() << "rank " << r << " did not fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce of 8 F32"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("all_reduce of 4 F32"), std::string::npos) << e.what();
    }
  }
  // The communicator is broken: a later call fails at once instead of waiting.
  ranks.handles[0]->all_reduce(a, a, 8, DType::F32, StreamKind::Compute);
  EXPECT_THROW(ranks.devices[0]->synchronize_all(), Error);
}

TEST(ThreadCollective, AMissingRankTimesOutNamingIt) {
  Ranks ranks(3, std::chrono::milliseconds(200));
  void* a = ranks.upload(0, random_values(8, 1));
  void* b = ranks.upload(1, random_values(8, 2));
  ranks.handles[0]->all_reduce(a, a, 8, DType::F32, StreamKind::Compute);
  ranks.handles[1]->all_reduce(b, b, 8, DType::F32, StreamKind::Compute);
  try {
    ranks.devices[0]->synchronize_all();
    FAIL() << "rank 0 did not time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ranks.devices[1]->synchronize_all(), Error);
}

TEST(ThreadCollective, RefusesWhatItCannotDo) {
  ThreadCommunicator comm(2);
  SimDevice device(SimDeviceOptions{});
  EXPECT_THROW(comm.join(2, device), Error);
  auto h = comm.join(0, device);
  EXPECT_THROW(h->all_reduce(nullptr, nullptr, 1, DType::I32, StreamKind::Compute), Error);
  EXPECT_THROW(h->broadcast(nullptr, 1, DType::F32, 5, StreamKind::Compute), Error);
  EXPECT_THROW(ThreadCommunicator(0), Error);
}

}  // namespace
}  // namespace ferry
