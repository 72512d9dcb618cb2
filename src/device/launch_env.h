// Where this process sits in a job of several processes, read from the environment the launchers
// users already have set: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK, PMI_SIZE) and Slurm's
// srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST). torchrun's variables win
// where several are set (torchrun inside an allocation). Without any, the job is this one process.
//
// Rank 0's address and port are where the others meet it to exchange NCCL's id
// (io/tcp_rendezvous.h): MASTER_ADDR/MASTER_PORT when set; under Slurm the job's first node; the
// port defaults to torchrun's 29500.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ferry {

struct LaunchEnv {
  std::string launcher = "none";  // torchrun, mpirun, mpich, slurm, none
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty for a single process
  int master_port = 29500;

  bool distributed() const { return world_size > 1; }
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// Parses the job's environment; throws ferry::Error naming the variable and the fix when it is
// incomplete or inconsistent (a rank outside the world, a world of several without an address).
LaunchEnv launch_env_from(const EnvLookup& lookup);
// The same from this process's environment.
LaunchEnv launch_env();

// The first host of a Slurm node list: "gpu[07-09,12],cpu01" -> "gpu07".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ferry
