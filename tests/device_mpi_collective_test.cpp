// MpiCollective: three processes under mpirun, each with a simulated device, summing, scattering and
// gathering with the bits ThreadCollective gives. The test binary starts mpirun on itself; the
// ranks run the MpiRanks tests and exit non-zero when any fails.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "device/mpi_collective.h"
#include "device/sim_device.h"

namespace ferry {
namespace {

constexpr int kRanks = 3;

bool in_mpi_child() {
  return std::getenv("FERRY_MPI_CHILD") != nullptr;
}

std::vector<float> values_of(int rank, size_t n) {
  std::mt19937 rng(static_cast<uint32_t>(11 + rank));
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8);
  return v;
}

struct Rank {
  Rank() : device(SimDeviceOptions{}), collective(mpi_collective(device)) {}
  void* upload(const void* data, size_t bytes) {
    void* p = device.allocate(bytes, "test");
    std::memcpy(p, data, bytes);
    return p;
  }
  SimDevice device;
  std::unique_ptr<Collective> collective;
};

TEST(MpiRanks, AllReduceIsTheSequentialSumInRankOrder) {
  if (!in_mpi_child()) GTEST_SKIP() << "runs under mpirun (MpiCollective.ThreeProcesses)";
  Rank me;
  ASSERT_EQ(me.collective->size(), kRanks);
  const size_t count = 5000;
  const std::vector<float> mine = values_of(me.collective->rank(), count);
  void* buf = me.upload(mine.data(), count * 4);
  me.collective->all_reduce(buf, buf, count, DType::F32, StreamKind::Compute);
  me.device.synchronize_all();
  std::vector<std::vector<float>> all;
  for (int r = 0; r < kRanks; ++r) all.push_back(values_of(r, count));
  for (size_t i = 0; i < count; ++i) {
    float expected = 0.0f;
    for (int r = 0; r < kRanks; ++r) expected += all[r][i];
    ASSERT_EQ(static_cast<float*>(buf)[i], expected) << i;
  }
}

TEST(MpiRanks, ReduceScatterThenAllGatherInBf16AndBroadcast) {
  if (!in_mpi_child()) GTEST_SKIP() << "runs under mpirun (MpiCollective.ThreeProcesses)";
  Rank me;
  const int rank = me.collective->rank();
  const size_t shard = 1001, count = shard * kRanks;
  std::vector<std::vector<uint16_t>> in(kRanks);
  for (int r = 0; r < kRanks; ++r)
    for (float x : values_of(100 + r, count)) in[r].push_back(f32_to_bf16(x));
  void* send = me.upload(in[rank].data(), count * 2);
  void* recv = me.device.allocate(shard * 2, "shard");
  void* gathered = me.device.allocate(count * 2, "gathered");
  me.collective->reduce_scatter(send, recv, shard, DType::BF16, StreamKind::Compute);
  me.collective->all_gather(recv, gathered, shard, DType::BF16, StreamKind::Compute);
  me.device.synchronize_all();
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < kRanks; ++r) sum += bf16_to_f32(in[r][i]);
    ASSERT_EQ(static_cast<uint16_t*>(gathered)[i], f32_to_bf16(sum)) << i;
  }
  const std::vector<float> root = values_of(7, 300), mine = values_of(rank == 1 ? 7 : 50 + rank, 300);
  void* b = me.upload(mine.data(), 300 * 4);
  me.collective->broadcast(b, 300, DType::F32, 1, StreamKind::HostToDevice);
  me.device.synchronize_all();
  EXPECT_EQ(0, std::memcmp(b, root.data(), 300 * 4));
}

TEST(MpiRanks, AMismatchIsAnErrorOnEveryRank) {
  if (!in_mpi_child()) GTEST_SKIP() << "runs under mpirun (MpiCollective.ThreeProcesses)";
  Rank me;
  const size_t count = me.collective->rank() == 2 ? 16 : 8;
  std::vector<float> v(16, 1.0f);
  void* buf = me.upload(v.data(), 16 * 4);
  me.collective->all_reduce(buf, buf, count, DType::F32, StreamKind::Compute);
  try {
    me.device.synchronize_all();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce of 16 F32"), std::string::npos) << e.what();
  }
  // The ranks compared before moving data: the next collective works.
  me.collective->all_reduce(buf, buf, 8, DType::F32, StreamKind::Compute);
  me.device.synchronize_all();
  EXPECT_EQ(static_cast<float*>(buf)[0], 3.0f);
}

TEST(MpiCollective, ThreeProcesses) {
  if (in_mpi_child()) GTEST_SKIP() << "the parent's test";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("FERRY_MPI_CHILD", "1", 1);
    // Containers and CI run as root; Open MPI asks for both variables to allow it.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    // MPI's own start-up allocations outlive MPI_Finalize; under LeakSanitizer the ranks would fail on them.
    const char* asan = std::getenv("ASAN_OPTIONS");
    setenv("ASAN_OPTIONS", (std::string(asan != nullptr ? asan : "") + ":detect_leaks=0").c_str(), 1);
    const std::string np = std::to_string(kRanks);
    execl(FERRY_MPIEXEC, FERRY_MPIEXEC, "-np", np.c_str(), "--oversubscribe", self.c_str(),
          "--gtest_filter=MpiRanks.*", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "mpirun was killed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a rank failed (its output is above)";
}

}  // namespace
}  // namespace ferry
