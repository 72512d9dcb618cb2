#include "device/mpi_collective.h"

#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "mpi";

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(kWhere, "{} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}

void ensure_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    // Calls come from several stream threads, one at a time (mpi_mutex).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    FERRY_CHECK(provided >= MPI_THREAD_SERIALIZED, kWhere,
                "this MPI gives thread level {}, ferry needs MPI_THREAD_SERIALIZED", provided);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  });
}

enum class Kind : int32_t { AllReduce, ReduceScatter, AllGather, Broadcast };

struct Call {
  int32_t kind;
  int32_t type;
  int32_t root;
  int32_t pad;
  uint64_t count;
};

std::string describe_call(const Call& c) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  std::string s = fmt::format("{} of {} {}", names[c.kind], c.count, dtype_name(static_cast<DType>(c.type)));
  if (static_cast<Kind>(c.kind) == Kind::Broadcast) s += fmt::format(" from rank {}", c.root);
  return s;
}

// MPI counts are ints: byte transfers past 1 GiB go as several calls.
constexpr size_t kChunk = size_t{1} << 30;

// recv holds `size` blocks of `bytes`, block r from rank r.
void allgather_bytes(const std::byte* send, size_t bytes, std::byte* recv, int size) {
  std::vector<std::byte> staging;
  for (size_t off = 0; off < bytes; off += kChunk) {
    const size_t n = std::min(kChunk, bytes - off);
    staging.resize(n * static_cast<size_t>(size));
    check(MPI_Allgather(send + off, static_cast<int>(n), MPI_BYTE, staging.data(), static_cast<int>(n),
                        MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgather");
    for (int r = 0; r < size; ++r)
      std::memcpy(recv + static_cast<size_t>(r) * bytes + off, staging.data() + static_cast<size_t>(r) * n,
                  n);
  }
}

void run(const Call& call, const void* send_v, void* recv, MpiWorld world) {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  const size_t n = static_cast<size_t>(world.size);
  std::vector<Call> calls(n);
  check(MPI_Allgather(&call, sizeof(Call), MPI_BYTE, calls.data(), sizeof(Call), MPI_BYTE, MPI_COMM_WORLD),
        "MPI_Allgather (the calls)");
  for (size_t r = 0; r < n; ++r)
    FERRY_CHECK(
        calls[r].kind == call.kind && calls[r].type == call.type && calls[r].root == call.root &&
            calls[r].count == call.count,
        kWhere,
        "a collective differs between ranks: rank {} issued {}, rank {} issued {}; every rank must issue the "
        "same collectives in the same order",
        world.rank, describe_call(call), r, describe_call(calls[r]));
  const DType type = static_cast<DType>(call.type);
  const size_t esize = dtype_size(type), count = call.count, bytes = count * esize;
  const auto* send = static_cast<const std::byte*>(send_v);
  auto* out = static_cast<std::byte*>(recv);
  switch (static_cast<Kind>(call.kind)) {
    case Kind::AllGather:
      allgather_bytes(send, bytes, out, world.size);
      return;
    case Kind::Broadcast:
      for (size_t off = 0; off < bytes; off += kChunk)
        check(MPI_Bcast(out + off, static_cast<int>(std::min(kChunk, bytes - off)), MPI_BYTE, call.root,
                        MPI_COMM_WORLD),
              "MPI_Bcast");
      return;
    case Kind::AllReduce:
    case Kind::ReduceScatter: {
      // Every rank's part (block r from rank r), then the sum in rank order, as ThreadCollective sums.
      std::vector<std::byte> parts(n * bytes);
      if (static_cast<Kind>(call.kind) == Kind::ReduceScatter) {
        FERRY_CHECK(bytes < static_cast<size_t>(INT_MAX), kWhere,
                    "a reduce_scatter shard of {} bytes is past MPI's int counts", bytes);
        // Rank r's shard of every rank's buffer comes to rank r: an all-to-all of shards.
        check(MPI_Alltoall(send, static_cast<int>(bytes), MPI_BYTE, parts.data(), static_cast<int>(bytes),
                           MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Alltoall");
      } else {
        allgather_bytes(send, bytes, parts.data(), world.size);
      }
      std::vector<std::byte> result(bytes);
      std::vector<const void*> blocks;
      for (size_t r = 0; r < n; ++r) blocks.push_back(parts.data() + r * bytes);
      sum_in_rank_order(blocks, 0, count, type, result.data());
      std::memcpy(out, result.data(), bytes);
      return;
    }
  }
}

class MpiRank final : public Collective {
 public:
  MpiRank(Device& device, MpiWorld world) : device_(device), world_(world) {}
  int rank() const override { return world_.rank; }
  int size() const override { return world_.size; }
  std::string describe() const override {
    return fmt::format("MPI (rank {} of {}, simulated devices)", world_.rank, world_.size);
  }
  void all_reduce(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue(Kind::AllReduce, send, recv, count, type, 0, stream);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue(Kind::ReduceScatter, send, recv, count, type, 0, stream);
  }
  void all_gather(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    issue(Kind::AllGather, send, recv, count, type, 0, stream);
  }
  void broadcast(void* buffer, size_t count, DType type, int root, StreamKind stream) override {
    FERRY_CHECK(root >= 0 && root < world_.size, kWhere, "broadcast from rank {}, of {} ranks", root,
                world_.size);
    issue(Kind::Broadcast, buffer, buffer, count, type, root, stream);
  }

 private:
  void issue(Kind kind, const void* send, void* recv, size_t count, DType type, int root, StreamKind stream) {
    FERRY_CHECK(collective_type_supported(type), kWhere, "collectives sum F32 or BF16, not {}",
                dtype_name(type));
    const Call call{static_cast<int32_t>(kind), static_cast<int32_t>(type), root, 0, count};
    const MpiWorld world = world_;
    device_.host_task(stream, [call, send, recv, world] { run(call, send, recv, world); });
  }

  Device& device_;
  const MpiWorld world_;
};

}  // namespace

MpiWorld mpi_world() {
  ensure_init();
  MpiWorld w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

std::unique_ptr<Collective> mpi_collective(Device& device) {
  FERRY_CHECK(device.native_stream(StreamKind::Compute) == nullptr, kWhere,
              "MPI collectives join simulated devices; {} needs NCCL", device.name());
  return std::make_unique<MpiRank>(device, mpi_world());
}

}  // namespace ferry
