// NCCL behind the collective seam (device/collective.h), for CUDA devices. NCCL is opened at run
// time (core/library_search.h: FERRY_NCCL_LIBRARY, NCCL_HOME, the CUDA toolkit, PyTorch's
// nvidia-nccl wheel), so a ferry built with CUDA runs on machines without it until a job of
// several GPUs asks for it.
//
// Each rank's calls must come from its own host thread (one per GPU, as the engine of several GPUs
// drives them), or NCCL waits for the other ranks inside the first call.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/collective.h"

namespace ferry {

// Empty when NCCL can be used here; otherwise why not, and what to do.
std::string nccl_unavailable_reason();

// One communicator over GPUs of this process (ncclCommInitAll): handle r drives devices[r].
std::vector<std::unique_ptr<Collective>> nccl_collectives(const std::vector<Device*>& devices);

// This process's GPU as rank `rank` of a job of `world_size` processes (ncclCommInitRank). Rank 0
// makes NCCL's id; `share_id` hands it from rank 0 to every rank (io/tcp_rendezvous.h) and returns it.
using ShareId = std::function<std::vector<std::byte>(const std::vector<std::byte>& id_on_rank0)>;
std::unique_ptr<Collective> nccl_collective(Device& device, int rank, int world_size,
                                            const ShareId& share_id);

}  // namespace ferry
