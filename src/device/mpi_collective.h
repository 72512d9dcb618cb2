// Collectives between processes over MPI (Open MPI or MPICH from the distribution), for simulated
// devices: the CPU stand-in for NCCL across processes, so a job of several processes runs in CI
// without GPUs (`mpirun -np N ferry ...`).
//
// Results equal ThreadCollective's bit for bit: each rank receives the others' data (MPI moves
// bytes, it does not add) and sums in rank order in fp32, rounding once. Before each collective the
// ranks compare what they were asked to do, so a mismatch is an error naming both calls instead of
// a hang or a wrong sum. Calls may come from several stream threads; they are serialized here.
#pragma once

#include <memory>
#include <string>

#include "device/collective.h"

namespace ferry {

// Built as its own library (ferry_device_mpi) where CMake finds MPI, and linked only by what uses it.

// MPI_Init_thread once per process (MPI_Finalize at exit); the world's rank and size.
struct MpiWorld {
  int rank = 0;
  int size = 1;
};
MpiWorld mpi_world();

// This process's handle of MPI_COMM_WORLD, issuing its work on `device` (a simulated device).
std::unique_ptr<Collective> mpi_collective(Device& device);

}  // namespace ferry
