// NCCL through the collective seam on the GPUs of this machine (one or more): the sums, shards and
// gathers ThreadCollective's tests check, against sums computed on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "core/dtype.h"
#include "device/device.h"
#include "device/nccl_collective.h"

namespace ferry {
namespace {

// The GPUs CUDA_VISIBLE_DEVICES shows, up to 8.
int gpu_count() {
  int n = 0;
  for (; n < 8; ++n) {
    try {
      make_cuda_device(n, size_t{1} << 20);
    } catch (const std::exception&) {
      break;
    }
  }
  return n;
}

TEST(NcclCollective, ReduceScatterAllGatherAndAllReduceOnEveryGpu) {
  if (!nccl_unavailable_reason().empty()) GTEST_SKIP() << nccl_unavailable_reason();
  const int n = gpu_count();
  ASSERT_GE(n, 1);
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<Device*> raw;
  for (int i = 0; i < n; ++i) {
    devices.push_back(make_cuda_device(i, size_t{1} << 30));
    raw.push_back(devices.back().get());
  }
  auto ranks = nccl_collectives(raw);
  ASSERT_EQ(static_cast<int>(ranks.size()), n);
  EXPECT_NE(ranks[0]->describe().find("NCCL"), std::string::npos);

  const size_t shard = 4099, count = shard * static_cast<size_t>(n);
  std::vector<std::vector<float>> in(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (auto& v : in)
    for (size_t i = 0; i < count; ++i) v.push_back(dist(rng));
  std::vector<void*> send(n), recv(n), gathered(n);
  std::vector<std::vector<float>> out(n, std::vector<float>(count)), reduced(n, std::vector<float>(count));
  // One host thread per GPU, as the engine drives them.
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Device& d = *devices[r];
      send[r] = d.allocate(count * 4, "send");
      recv[r] = d.allocate(shard * 4, "shard");
      gathered[r] = d.allocate(count * 4, "gathered");
      float* pinned = static_cast<float*>(d.allocate_pinned(count * 4, "host"));
      std::memcpy(pinned, in[r].data(), count * 4);
      d.copy_to_device(send[r], pinned, count * 4, StreamKind::Compute);
      ranks[r]->reduce_scatter(send[r], recv[r], shard, DType::F32, StreamKind::Compute);
      ranks[r]->all_gather(recv[r], gathered[r], shard, DType::F32, StreamKind::Compute);
      d.copy_to_host(pinned, gathered[r], count * 4, StreamKind::Compute);
      d.synchronize_all();
      std::memcpy(out[r].data(), pinned, count * 4);
      ranks[r]->all_reduce(send[r], send[r], count, DType::F32, StreamKind::Compute);
      d.copy_to_host(pinned, send[r], count * 4, StreamKind::Compute);
      d.synchronize_all();
      std::memcpy(reduced[r].data(), pinned, count * 4);
      d.release_pinned(pinned);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < count; ++i) {
    double sum = 0.0, magnitude = 0.0;
    for (int r = 0; r < n; ++r) {
      sum += in[r][i];
      magnitude += std::fabs(in[r][i]);
    }
    // NCCL's order of summation is its own: within the rounding of n - 1 fp32 additions.
    const double bound = magnitude * n * 6e-8 + 1e-30;
    for (int r = 0; r < n; ++r) {
      ASSERT_NEAR(out[r][i], sum, bound) << "gathered, rank " << r << " element " << i;
      ASSERT_NEAR(reduced[r][i], sum, bound) << "all_reduce, rank " << r << " element " << i;
    }
  }
  for (int r = 0; r < n; ++r) {
    devices[r]->release(send[r]);
    devices[r]->release(recv[r]);
    devices[r]->release(gathered[r]);
  }
  ranks.clear();
}

}  // namespace
}  // namespace ferry
