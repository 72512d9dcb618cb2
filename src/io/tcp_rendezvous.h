// The meeting of a job's processes before NCCL exists: rank 0 listens on a TCP port, every other
// rank connects and receives rank 0's bytes (NCCL's unique id), and nobody goes on before all have
// met. It carries a few bytes once, not the job's traffic (that is NCCL's).
//
// Every failure says what to check: a port in use, a rank that cannot reach rank 0 (not started,
// wrong MASTER_ADDR/MASTER_PORT, a firewall), ranks that never arrive, two processes claiming one
// rank, or processes started with different world sizes.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ferry {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0 on rank 0: any free port, reported through on_listening
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  std::function<void(int port)> on_listening;  // rank 0, once it listens
};

// Rank 0 passes `payload` and gets it back; the others pass nothing and get rank 0's payload.
std::vector<std::byte> rendezvous_broadcast(const RendezvousOptions& options,
                                            const std::vector<std::byte>& payload);

}  // namespace ferry
