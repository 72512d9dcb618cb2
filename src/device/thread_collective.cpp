#include "device/thread_collective.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "collective";

const char* kind_name(ThreadCommunicator::Kind kind) {
  switch (kind) {
    case ThreadCommunicator::Kind::AllReduce:
      return "all_reduce";
    case ThreadCommunicator::Kind::ReduceScatter:
      return "reduce_scatter";
    case ThreadCommunicator::Kind::AllGather:
      return "all_gather";
    case ThreadCommunicator::Kind::Broadcast:
      return "broadcast";
  }
  return "?";
}

std::string describe_call(const ThreadCommunicator::Call& c) {
  std::string s = fmt::format("{} of {} {}", kind_name(c.kind), c.count, dtype_name(c.type));
  if (c.kind == ThreadCommunicator::Kind::Broadcast) s += fmt::format(" from rank {}", c.root);
  return s;
}

class ThreadRank final : public Collective {
 public:
  ThreadRank(ThreadCommunicator& comm, int rank, Device& device)
      : comm_(comm), rank_(rank), device_(device) {}
  int rank() const override { return rank_; }
  int size() const override { return comm_.size(); }
  std::string describe() const override {
    return fmt::format("threads (rank {} of {}, simulated devices)", rank_, comm_.size());
  }
  void all_reduce(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue({ThreadCommunicator::Kind::AllReduce, send, recv, count, type, 0}, stream);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue({ThreadCommunicator::Kind::ReduceScatter, send, recv, count, type, 0}, stream);
  }
  void all_gather(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue({ThreadCommunicator::Kind::AllGather, send, recv, count, type, 0}, stream);
  }
  void broadcast(void* buffer, size_t count, DType type, int root, StreamKind stream) override {
    FERRY_CHECK(root >= 0 && root < comm_.size(), kWhere, "broadcast from rank {}, of {} ranks", root,
                comm_.size());
    issue({ThreadCommunicator::Kind::Broadcast, buffer, buffer, count, type, root}, stream);
  }

 private:
  void issue(const ThreadCommunicator::Call& call, StreamKind stream) {
    FERRY_CHECK(collective_type_supported(call.type), kWhere, "collectives sum F32 or BF16, not {}",
                dtype_name(call.type));
    ThreadCommunicator* comm = &comm_;
    const int rank = rank_;
    device_.host_task(stream, [comm, rank, call] { comm->run(rank, call); });
  }
  ThreadCommunicator& comm_;
  const int rank_;
  Device& device_;
};

}  // namespace

ThreadCommunicator::ThreadCommunicator(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      posted_(static_cast<size_t>(size)),
      calls_made_(static_cast<size_t>(size)) {
  FERRY_CHECK(size >= 1, kWhere, "a communicator has at least one rank, not {}", size);
  for (Barrier& b : barriers_) b.here.assign(static_cast<size_t>(size), false);
}

std::unique_ptr<Collective> ThreadCommunicator::join(int rank, Device& device) {
  FERRY_CHECK(rank >= 0 && rank < size_, kWhere, "rank {} joins a communicator of {} ranks", rank, size_);
  FERRY_CHECK(
      device.native_stream(StreamKind::Compute) == nullptr, kWhere,
      "thread collectives join devices whose memory the host reads (simulated devices); {} needs NCCL",
      device.name());
  return std::make_unique<ThreadRank>(*this, rank, device);
}

void ThreadCommunicator::meet(std::unique_lock<std::mutex>& lock, int rank, int which, const char* phase) {
  Barrier& b = barriers_[which];
  const uint64_t generation = b.generation;
  b.here[static_cast<size_t>(rank)] = true;
  if (++b.arrived == size_) {
    b.arrived = 0;
    std::fill(b.here.begin(), b.here.end(), false);
    ++b.generation;
    changed_.notify_all();
    return;
  }
  const bool met =
      changed_.wait_for(lock, timeout_, [&] { return b.generation != generation || !broken_.empty(); });
  if (!broken_.empty()) throw Error(broken_);
  if (met) return;
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r)
    if (!b.here[static_cast<size_t>(r)]) missing.push_back(r);
  broken_ = fmt::format(
      "[{}] rank {} waited {} ms {} collective #{} ({}) for rank(s) {}: a rank stopped, failed, or issued "
      "its collectives in another order",
      kWhere, rank, timeout_.count(), phase, calls_made_[static_cast<size_t>(rank)],
      describe_call(posted_[static_cast<size_t>(rank)]), fmt::join(missing, ", "));
  changed_.notify_all();
  throw Error(broken_);
}

void ThreadCommunicator::check_calls_match(int rank) const {
  const Call& mine = posted_[static_cast<size_t>(rank)];
  for (int r = 0; r < size_; ++r) {
    const Call& other = posted_[static_cast<size_t>(r)];
    if (other.kind == mine.kind && other.count == mine.count && other.type == mine.type &&
        other.root == mine.root)
      continue;
    throw Error(fmt::format(
        "[{}] collective #{} differs between ranks: rank {} issued {}, rank {} issued {}; every rank must "
        "issue "
        "the same collectives in the same order",
        kWhere, calls_made_[static_cast<size_t>(rank)], rank, describe_call(mine), r, describe_call(other)));
  }
}

std::vector<std::byte> ThreadCommunicator::compute(int rank) const {
  const Call& mine = posted_[static_cast<size_t>(rank)];
  const size_t esize = dtype_size(mine.type), n = mine.count;
  std::vector<std::byte> out;
  switch (mine.kind) {
    case Kind::AllReduce:
    case Kind::ReduceScatter: {
      // Rank r's shard of a reduce-scatter starts at r * count in every rank's send buffer.
      const size_t offset = mine.kind == Kind::ReduceScatter ? static_cast<size_t>(rank) * n : 0;
      out.resize(n * esize);
      std::vector<const void*> parts;
      for (const Call& c : posted_) parts.push_back(c.send);
      sum_in_rank_order(parts, offset, n, mine.type, out.data());
      break;
    }
    case Kind::AllGather:
      out.resize(static_cast<size_t>(size_) * n * esize);
      for (int r = 0; r < size_; ++r)
        std::memcpy(out.data() + static_cast<size_t>(r) * n * esize, posted_[static_cast<size_t>(r)].send,
                    n * esize);
      break;
    case Kind::Broadcast:
      out.resize(n * esize);
      std::memcpy(out.data(), posted_[static_cast<size_t>(mine.root)].send, n * esize);
      break;
  }
  return out;
}

void ThreadCommunicator::run(int rank, const Call& call) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty()) throw Error(broken_);
  posted_[static_cast<size_t>(rank)] = call;
  ++calls_made_[static_cast<size_t>(rank)];
  meet(lock, rank, 0, "at");
  std::vector<std::byte> result;
  std::string mismatch;
  lock.unlock();
  try {
    check_calls_match(rank);
    result = compute(rank);
  } catch (const Error& e) {
    mismatch = e.what();
  }
  lock.lock();
  // Every rank reads before any writes: the second meeting is also where a mismatch, which every
  // rank sees alike, stops all of them.
  meet(lock, rank, 1, "after reading");
  if (!mismatch.empty()) {
    if (broken_.empty()) broken_ = mismatch;
    throw Error(mismatch);
  }
  lock.unlock();
  if (!result.empty()) std::memcpy(call.recv, result.data(), result.size());
}

}  // namespace ferry
