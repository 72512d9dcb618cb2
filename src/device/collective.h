// Collectives between the devices of one job (one process with several GPUs, or one process per
// machine): the seam through which the sliding engine of several devices sums gradients and shares
// weights. Each call is one rank's part; it is ordered on a stream of that rank's device like a
// copy, so the engine issues it where the data is ready and later work on that stream sees the
// result. Every rank must issue the same collectives, with the same counts and types, in the same
// order (as with NCCL); a backend that can see a mismatch reports it instead of hanging.
//
// Backends: ThreadCollective (several SimDevices in one process, for tests), NcclCollective
// (device/cuda: GPUs of one process through ncclCommInitAll, or one GPU per process across
// machines through ncclCommInitRank after a rendezvous).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "device/device.h"

namespace ferry {

// Element types a collective sums: F32 and BF16 (the gradients' and the weights' types).
bool collective_type_supported(DType type);

// out[i] = the sum over ranks r, in rank order, of parts[r][offset + i] for i < count, added in fp32
// and rounded once to `type`: the sums of the CPU backends (thread and MPI), equal bit for bit.
void sum_in_rank_order(const std::vector<const void*>& parts, size_t offset, size_t count, DType type,
                       void* out);

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string describe() const = 0;

  // recv[i] = sum over ranks of that rank's send[i], for i < count, on every rank; send may be recv.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType type, StreamKind stream) = 0;
  // Rank r gets recv[i] = sum over ranks of send[r * count + i], i < count: each rank ends with its
  // shard of the sum (the gradient shard it sends to the host). send holds size() * count elements.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType type, StreamKind stream) = 0;
  // recv[r * count + i] = rank r's send[i]: every rank ends with every shard (the updated weights).
  virtual void all_gather(const void* send, void* recv, size_t count, DType type, StreamKind stream) = 0;
  // Every rank's buffer becomes the root's.
  virtual void broadcast(void* buffer, size_t count, DType type, int root, StreamKind stream) = 0;
};

}  // namespace ferry
