// The job's place read from torchrun's, mpirun's, MPICH's and Slurm's environments.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "device/launch_env.h"

namespace ferry {
namespace {

LaunchEnv parse(const std::map<std::string, std::string>& vars) {
  return launch_env_from([&](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, NothingSetIsOneProcess) {
  const LaunchEnv env = parse({});
  EXPECT_EQ(env.launcher, "none");
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.distributed());
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv env = parse({{"RANK", "5"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"MASTER_ADDR", "10.0.0.7"},
                               {"MASTER_PORT", "29511"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29511);
}

TEST(LaunchEnv, OpenMpiOnOneMachineMeetsOnLocalhost) {
  const LaunchEnv env = parse({{"OMPI_COMM_WORLD_RANK", "2"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(env.launcher, "mpirun");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(LaunchEnv, MpichAndSlurm) {
  EXPECT_EQ(parse({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}).launcher, "mpich");
  const LaunchEnv env = parse({{"SLURM_PROCID", "3"},
                               {"SLURM_NTASKS", "4"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NTASKS_PER_NODE", "2"},
                               {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "gpu07");
  // A batch script's own shell has SLURM_PROCID but is not a job step of several tasks.
  EXPECT_EQ(parse({{"SLURM_PROCID", "0"}}).launcher, "none");
}

TEST(LaunchEnv, TorchrunWinsInsideAnAllocation) {
  EXPECT_EQ(
      parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).launcher,
      "torchrun");
}

TEST(LaunchEnv, SlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("a01,b02"), "a01");
  EXPECT_EQ(first_slurm_host("gpu[07-09,12],cpu01"), "gpu07");
  EXPECT_EQ(first_slurm_host("gpu[3,5]"), "gpu3");
  EXPECT_EQ(first_slurm_host("x1,gpu[3,5]"), "x1");
  EXPECT_THROW(first_slurm_host("gpu[3"), Error);
}

TEST(LaunchEnv, BadEnvironmentsSayWhatToSet) {
  EXPECT_NE(error_of({{"RANK", "1"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("rank 4 is outside a world of 4"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).find("RANK=x is not"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}})
                .find("needs MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("not a TCP port"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("at least 1"), std::string::npos);
}

}  // namespace
}  // namespace ferry
