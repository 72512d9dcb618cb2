// NCCL collectives on CUDA devices, NCCL opened with dlopen (device/nccl_collective.h).
#include "device/nccl_collective.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/library_search.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "nccl";

// The entry points ferry calls, resolved once from the first library that loads.
struct NcclLibrary {
  std::string error;  // why it is not available
  std::string path;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  int version = 0;
};

const NcclLibrary& nccl() {
  static NcclLibrary lib;
  static std::once_flag once;
  std::call_once(once, [] {
    const LibrarySearch search{
        "libnccl.so.2", "FERRY_NCCL_LIBRARY", {"NCCL_HOME", "NCCL_ROOT"}, "nvidia/nccl/lib"};
    void* handle = nullptr;
    std::string first_error;
    for (const std::string& candidate : library_candidates(search)) {
      handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        lib.path = candidate;
        break;
      }
      if (first_error.empty()) first_error = dlerror();
    }
    if (handle == nullptr) {
      lib.error = fmt::format(
          "NCCL (libnccl.so.2) was not found ({}); install it (NVIDIA's libnccl2, or PyTorch's nvidia-nccl "
          "wheel), or set FERRY_NCCL_LIBRARY to the library",
          first_error);
      return;
    }
    auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr && lib.error.empty())
        lib.error = fmt::format("{} lacks {}; use NCCL 2.12 or newer", lib.path, name);
    };
    resolve(lib.get_error_string, "ncclGetErrorString");
    resolve(lib.get_version, "ncclGetVersion");
    resolve(lib.get_unique_id, "ncclGetUniqueId");
    resolve(lib.comm_init_all, "ncclCommInitAll");
    resolve(lib.comm_init_rank, "ncclCommInitRank");
    resolve(lib.comm_destroy, "ncclCommDestroy");
    resolve(lib.all_reduce, "ncclAllReduce");
    resolve(lib.reduce_scatter, "ncclReduceScatter");
    resolve(lib.all_gather, "ncclAllGather");
    resolve(lib.broadcast, "ncclBroadcast");
    if (lib.error.empty()) lib.get_version(&lib.version);
  });
  return lib;
}

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  fail(kWhere, "{} failed: {} (NCCL_DEBUG=WARN says more)", what, nccl().get_error_string(result));
}

const NcclLibrary& checked_nccl() {
  const NcclLibrary& lib = nccl();
  FERRY_CHECK(lib.error.empty(), kWhere, "{}", lib.error);
  return lib;
}

ncclDataType_t nccl_type(DType type) {
  FERRY_CHECK(collective_type_supported(type), kWhere, "collectives sum F32 or BF16, not {}",
              dtype_name(type));
  return type == DType::F32 ? ncclFloat32 : ncclBfloat16;
}

class NcclRank final : public Collective {
 public:
  NcclRank(ncclComm_t comm, Device& device, int rank, int size)
      : comm_(comm), device_(device), rank_(rank), size_(size) {}
  ~NcclRank() override {
    (void)cudaSetDevice(device_.index());
    (void)nccl().comm_destroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override {
    const int v = nccl().version;
    return fmt::format("NCCL {}.{}.{} (rank {} of {}, {})", v / 10000, v / 100 % 100, v % 100, rank_, size_,
                       device_.name());
  }
  void all_reduce(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    prepare();
    check(nccl().all_reduce(send, recv, count, nccl_type(type), ncclSum, comm_, native(stream)),
          "all_reduce");
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    prepare();
    check(nccl().reduce_scatter(send, recv, count, nccl_type(type), ncclSum, comm_, native(stream)),
          "reduce_scatter");
  }
  void all_gather(const void* send, void* recv, size_t count, DType type, StreamKind stream) override {
    prepare();
    check(nccl().all_gather(send, recv, count, nccl_type(type), comm_, native(stream)), "all_gather");
  }
  void broadcast(void* buffer, size_t count, DType type, int root, StreamKind stream) override {
    FERRY_CHECK(root >= 0 && root < size_, kWhere, "broadcast from rank {}, of {} ranks", root, size_);
    prepare();
    check(nccl().broadcast(buffer, buffer, count, nccl_type(type), root, comm_, native(stream)), "broadcast");
  }

 private:
  void prepare() const { (void)cudaSetDevice(device_.index()); }
  cudaStream_t native(StreamKind stream) const {
    return static_cast<cudaStream_t>(device_.native_stream(stream));
  }
  ncclComm_t comm_;
  Device& device_;
  const int rank_, size_;
};

void check_cuda_devices(const std::vector<Device*>& devices) {
  for (Device* d : devices)
    FERRY_CHECK(d != nullptr && d->native_stream(StreamKind::Compute) != nullptr, kWhere,
                "NCCL joins CUDA devices; {} is not one (simulated devices use thread collectives)",
                d != nullptr ? d->name() : "a null device");
}

}  // namespace

std::string nccl_unavailable_reason() {
  return nccl().error;
}

std::vector<std::unique_ptr<Collective>> nccl_collectives(const std::vector<Device*>& devices) {
  const NcclLibrary& lib = checked_nccl();
  FERRY_CHECK(!devices.empty(), kWhere, "a communicator needs at least one GPU");
  check_cuda_devices(devices);
  std::vector<int> indices;
  for (Device* d : devices) indices.push_back(d->index());
  std::vector<ncclComm_t> comms(devices.size());
  check(lib.comm_init_all(comms.data(), static_cast<int>(devices.size()), indices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Collective>> out;
  for (size_t r = 0; r < devices.size(); ++r)
    out.push_back(std::make_unique<NcclRank>(comms[r], *devices[r], static_cast<int>(r),
                                             static_cast<int>(devices.size())));
  return out;
}

std::unique_ptr<Collective> nccl_collective(Device& device, int rank, int world_size,
                                            const ShareId& share_id) {
  const NcclLibrary& lib = checked_nccl();
  check_cuda_devices({&device});
  FERRY_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, kWhere, "rank {} of a world of {}", rank,
              world_size);
  ncclUniqueId id{};
  std::vector<std::byte> mine;
  if (rank == 0) {
    check(lib.get_unique_id(&id), "ncclGetUniqueId");
    mine.resize(sizeof id);
    std::memcpy(mine.data(), &id, sizeof id);
  }
  const std::vector<std::byte> shared = share_id(mine);
  FERRY_CHECK(shared.size() == sizeof id, kWhere,
              "rank {} received {} bytes of NCCL id, not {}: every rank must run the same ferry and NCCL",
              rank, shared.size(), sizeof id);
  std::memcpy(&id, shared.data(), sizeof id);
  (void)cudaSetDevice(device.index());
  ncclComm_t comm = nullptr;
  check(lib.comm_init_rank(&comm, world_size, id, rank), "ncclCommInitRank");
  return std::make_unique<NcclRank>(comm, device, rank, world_size);
}

}  // namespace ferry
