// Collectives between several SimDevices of one process (device/collective.h): the tests' stand-in
// for NCCL, so that every multi-device schedule runs in CI without GPUs.
//
// Rank r's call runs as a host task on r's stream. The ranks meet there; each computes its own part
// from every rank's buffers (the devices' memory is host memory), sums in rank order in fp32 and
// rounds once to the element type, then meets the others again before it writes, so an in-place
// call never overwrites what another rank still reads. The result is therefore deterministic and
// independent of thread timing: for F32 it is the sequential sum x0 + x1 + ... in rank order.
//
// A rank that issues a different collective than the others (kind, count, type or root) makes every
// rank's call fail with both calls named; a rank that does not arrive within the timeout makes the
// waiting ranks fail naming it. Either error reaches the host at the device's next synchronize*()
// and breaks the communicator: later calls fail at once instead of waiting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/collective.h"

namespace ferry {

class ThreadCommunicator {
 public:
  explicit ThreadCommunicator(int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ThreadCommunicator(const ThreadCommunicator&) = delete;
  ThreadCommunicator& operator=(const ThreadCommunicator&) = delete;

  int size() const { return size_; }
  // Rank `rank`'s handle, issuing its work on `device` (a device whose memory the host can read:
  // SimDevice). The communicator must outlive every handle and every call still queued.
  std::unique_ptr<Collective> join(int rank, Device& device);

  enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast };
  struct Call {
    Kind kind = Kind::AllReduce;
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DType type = DType::F32;
    int root = 0;
  };
  // Rank `rank`'s part of one collective; blocks until every rank has arrived. Runs on a stream.
  void run(int rank, const Call& call);

 private:
  // Waits until all ranks have arrived at barrier `which` (0: posted, 1: read), or fails.
  void meet(std::unique_lock<std::mutex>& lock, int rank, int which, const char* phase);
  void check_calls_match(int rank) const;
  std::vector<std::byte> compute(int rank) const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> posted_;
  std::vector<int64_t> calls_made_;  // per rank, for messages
  struct Barrier {
    int arrived = 0;
    uint64_t generation = 0;
    std::vector<bool> here;
  };
  Barrier barriers_[2];
  std::string broken_;  // why the communicator stopped, once it has
};

}  // namespace ferry
