// CudaDevice: the Device interface on one CUDA GPU, with the CUDA runtime API (host code only, so
// this file is plain C++ and may use fmt).
//
// * Three non-blocking streams (compute, h2d, d2h); nothing here synchronizes the whole device
//   except release() (cudaFree does) and the destructor.
// * Timeline stamps (for traces) are timing-enabled events of a separate pool, read with
//   cudaEventElapsedTime against an anchor event whose host time is known; the schedule's events
//   keep timing disabled, so a run without a trace pays nothing for them.
// * Events come from a pool of cudaEvent_t (timing disabled). EventIds grow by one per record; the
//   oldest recorded events are retired to the free list once complete, so an id older than every
//   live one is known complete and its handle can be reused without changing what it meant.
// * Memory: cudaMalloc counted against the capacity (the `gpu_memory` budget), so a 24 GiB budget
//   is enforced on a 141 GB card; refused with the numbers. Pinned memory: blocks of a huge page or
//   more are core/host_pages.h mappings committed on the thread pool and registered
//   (cudaHostRegister, portable), three times as fast as cudaHostAlloc, which clears and locks
//   its pages on one driver thread (27 GiB took ~15 s); smaller ones cudaHostAlloc. Memory
//   allocated elsewhere is locked in place with cudaHostRegister.
// * host_task: cudaLaunchHostFunc. CUDA runs such functions on one driver thread, in order, so a
//   long host task delays other streams' host tasks (not their kernels or copies). An exception
//   thrown by fn is kept and rethrown by the next synchronize*().
#include <cuda_runtime_api.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/host_pages.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/async_error.h"
#include "device/device.h"
#include "device/memory_ledger.h"

namespace ferry {

namespace {

// Owns one CUDA handle; the destructor never throws (a failed destroy at teardown is ignored).
template <typename Handle, cudaError_t (*Destroy)(Handle)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(Handle handle) : handle_(handle) {}
  ~CudaHandle() {
    if (handle_ != nullptr) (void)Destroy(handle_);
  }
  CudaHandle(CudaHandle&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    if (this != &o) {
      if (handle_ != nullptr) (void)Destroy(handle_);
      handle_ = o.handle_;
      o.handle_ = nullptr;
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  Handle get() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using CudaStream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using CudaEvent = CudaHandle<cudaEvent_t, cudaEventDestroy>;

// What cudaLaunchHostFunc carries to the driver's thread; deleted there after the call.
struct HostTask {
  std::function<void()> fn;
  AsyncError* errors;
};

void CUDART_CB run_host_task(void* data) {
  std::unique_ptr<HostTask> task(static_cast<HostTask*>(data));
  try {
    task->fn();
  } catch (...) {
    task->errors->store(std::current_exception());
  }
}

class CudaDevice final : public Device {
 public:
  // `free_bytes`: the card's free memory as the device is opened (what a device without a budget gets).
  CudaDevice(int index, size_t capacity, size_t free_bytes)
      : index_(index),
        free_when_opened_(free_bytes),
        where_(fmt::format("cuda device {}", index)),
        memory_(where_, "GPU memory", capacity),
        pinned_(where_, "pinned memory", pinned_limit()) {
    activate();
    cudaDeviceProp props{};
    FERRY_CUDA_CHECK(cudaGetDeviceProperties(&props, index_));
    name_ = fmt::format("cuda:{} {}", index_, props.name);
    for (auto& stream : streams_) {
      cudaStream_t s = nullptr;
      FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      stream = CudaStream(s);
    }
  }

  ~CudaDevice() override {
    try {
      synchronize_all();
    } catch (const std::exception& e) {
      log_warn("[{}] error while draining the streams at destruction: {}", where_, e.what());
    }
    (void)cudaSetDevice(index_);
    for (const auto& [pointer, what, origin] : memory_.blocks()) {
      log_debug("[{}] freeing {} still allocated at destruction", where_, what);
      memory_.forget(pointer);
      (void)cudaFree(pointer);
    }
    for (const auto& [pointer, what, origin] : pinned_.blocks()) {
      log_debug("[{}] releasing pinned {} still held at destruction", where_, what);
      pinned_.forget(pointer, origin);
      if (origin == BlockOrigin::Registered)
        (void)cudaHostUnregister(pointer);
      else
        free_pinned(pointer, false);
    }
  }

  std::string name() const override { return name_; }
  int index() const override { return index_; }
  void bind_thread() override { activate(); }

  void* allocate(size_t bytes, const char* what) override {
    if (bytes == 0) return nullptr;
    activate();
    memory_.admit(bytes, what);
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      memory_.cancel(bytes);
      (void)cudaGetLastError();  // an out-of-memory is not sticky; clear it
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      const MemoryStats s = memory_.stats();
      fail(where_.c_str(),
           "cudaMalloc of {} for {} failed: {} ({} of the {} budget in use; the card has {} free of {}); "
           "lower gpu_memory or free the GPU",
           format_bytes(bytes), what ? what : "?", cudaGetErrorString(status), format_bytes(s.in_use),
           format_bytes(s.capacity), format_bytes(free_bytes), format_bytes(total_bytes));
    }
    memory_.record(p, bytes, what);
    return p;
  }

  void release(void* pointer) override {
    if (pointer == nullptr) return;
    activate();
    memory_.forget(pointer);
    FERRY_CUDA_CHECK(cudaFree(pointer));
  }

  MemoryStats memory() const override { return memory_.stats(); }
  size_t uncapped_memory() const override { return free_when_opened_; }

  void* allocate_pinned(size_t bytes, const char* what) override {
    if (bytes == 0) return nullptr;
    activate();
    pinned_.admit(bytes, what);
    void* p = bytes >= kHugePageBytes ? map_pinned(bytes, what) : host_alloc(bytes, what);
    pinned_.record(p, bytes, what);
    return p;
  }

  void release_pinned(void* pointer) override {
    if (pointer == nullptr) return;
    pinned_.forget(pointer);
    free_pinned(pointer, true);
  }

  void register_pinned(void* pointer, size_t bytes, const char* what) override {
    if (pointer == nullptr || bytes == 0) return;
    activate();
    pinned_.admit(bytes, what);
    const cudaError_t status = cudaHostRegister(pointer, bytes, cudaHostRegisterPortable);
    if (status != cudaSuccess) refuse_registration(bytes, what, status);
    pinned_.record(pointer, bytes, what, BlockOrigin::Registered);
  }

  void unregister_pinned(void* pointer) override {
    if (pointer == nullptr) return;
    pinned_.forget(pointer, BlockOrigin::Registered);
    FERRY_CUDA_CHECK(cudaHostUnregister(pointer));
  }

  MemoryStats pinned_memory() const override { return pinned_.stats(); }

  void copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) override {
    if (bytes == 0) return;
    check_device_range(device_dst, bytes, "copy_to_device");
    FERRY_CUDA_CHECK(
        cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, cuda_stream(stream)));
  }

  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) override {
    if (bytes == 0) return;
    check_device_range(device_src, bytes, "copy_to_host");
    FERRY_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, cuda_stream(stream)));
  }

  void copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) override {
    if (bytes == 0) return;
    check_device_range(dst, bytes, "copy_on_device");
    check_device_range(src, bytes, "copy_on_device");
    FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(stream)));
  }

  void fill_zero(void* device_dst, size_t bytes, StreamKind stream) override {
    if (bytes == 0) return;
    check_device_range(device_dst, bytes, "fill_zero");
    FERRY_CUDA_CHECK(cudaMemsetAsync(device_dst, 0, bytes, cuda_stream(stream)));
  }

  void host_task(StreamKind stream, std::function<void()> fn) override {
    FERRY_ASSERT(fn != nullptr);
    auto task = std::make_unique<HostTask>(HostTask{std::move(fn), &errors_});
    FERRY_CUDA_CHECK(cudaLaunchHostFunc(cuda_stream(stream), run_host_task, task.get()));
    task.release();  // run_host_task owns it now
  }

  void* native_stream(StreamKind stream) override { return cuda_stream(stream); }

  EventId record(StreamKind stream) override {
    std::lock_guard<std::mutex> lock(event_mutex_);
    retire_completed_events();
    CudaEvent event;
    if (!free_events_.empty()) {
      event = std::move(free_events_.back());
      free_events_.pop_back();
    } else {
      activate();
      cudaEvent_t e = nullptr;
      FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      event = CudaEvent(e);
    }
    FERRY_CUDA_CHECK(cudaEventRecord(event.get(), cuda_stream(stream)));
    live_events_.push_back(std::move(event));
    return first_live_ + static_cast<EventId>(live_events_.size()) - 1;
  }

  void wait(StreamKind stream, EventId event) override {
    std::lock_guard<std::mutex> lock(event_mutex_);
    cudaEvent_t e = live_event(event);
    if (e == nullptr) return;  // retired: complete
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream), e, 0));
  }

  void synchronize(EventId event) override {
    cudaEvent_t e;
    {
      std::lock_guard<std::mutex> lock(event_mutex_);
      e = live_event(event);
    }
    // Outside the lock: should the event be retired and its handle re-recorded meanwhile, this waits
    // for later work too, which is still correct (the event it stood for is complete).
    if (e != nullptr) FERRY_CUDA_CHECK(cudaEventSynchronize(e));
    rethrow_host_task_error();
  }

  void synchronize_all() override {
    for (auto& stream : streams_) FERRY_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    rethrow_host_task_error();
  }

  StampId record_stamp(StreamKind stream) override {
    std::lock_guard<std::mutex> lock(stamp_mutex_);
    if (stamps_.empty()) anchor_clock();
    CudaEvent event;
    if (!free_stamps_.empty()) {
      event = std::move(free_stamps_.back());
      free_stamps_.pop_back();
    } else {
      event = make_timing_event();
    }
    FERRY_CUDA_CHECK(cudaEventRecord(event.get(), cuda_stream(stream)));
    const StampId id = next_stamp_++;
    stamps_.emplace(id, std::move(event));
    return id;
  }

  double take_stamp(StampId stamp) override {
    cudaEvent_t e;
    {
      std::lock_guard<std::mutex> lock(stamp_mutex_);
      auto it = stamps_.find(stamp);
      FERRY_ASSERT(it != stamps_.end(), "a stamp that was never recorded, or was taken already");
      e = it->second.get();
    }
    // Outside the lock; the handle stays ours (and the anchor unchanged) while the stamp is listed.
    FERRY_CUDA_CHECK(cudaEventSynchronize(e));
    std::lock_guard<std::mutex> lock(stamp_mutex_);
    float ms = 0.0f;
    FERRY_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_event_.get(), e));
    auto it = stamps_.find(stamp);
    free_stamps_.push_back(std::move(it->second));
    stamps_.erase(it);
    return anchor_seconds_ + 1e-3 * static_cast<double>(ms);
  }

 private:
  static size_t pinned_limit() {
    // A sanity limit only; the planner sizes pinned memory against the host's RAM.
    return size_t{1} << 42;
  }

  void activate() const { FERRY_CUDA_CHECK(cudaSetDevice(index_)); }

  cudaStream_t cuda_stream(StreamKind stream) const {
    const int s = static_cast<int>(stream);
    FERRY_ASSERT(s >= 0 && s < kStreamCount, "unknown stream");
    return streams_[s].get();
  }

  void check_device_range(const void* pointer, size_t bytes, const char* op) const {
    FERRY_CHECK(memory_.contains(pointer, bytes), where_.c_str(),
                "{}: {} at {} is not inside one allocation of this device", op, format_bytes(bytes), pointer);
  }

  // Moves complete events from the front of the live list to the free list. Caller holds event_mutex_.
  void retire_completed_events() {
    while (!live_events_.empty()) {
      const cudaError_t status = cudaEventQuery(live_events_.front().get());
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return;
      }
      FERRY_CUDA_CHECK(status);
      free_events_.push_back(std::move(live_events_.front()));
      live_events_.pop_front();
      ++first_live_;
    }
  }

  // The handle of a live event; nullptr when the id is older than every live event (complete).
  // Caller holds event_mutex_.
  cudaEvent_t live_event(EventId event) const {
    FERRY_ASSERT(event >= 1 && event < first_live_ + static_cast<EventId>(live_events_.size()),
                 "not an event recorded on this device");
    if (event < first_live_) return nullptr;
    return live_events_[static_cast<size_t>(event - first_live_)].get();
  }

  CudaEvent make_timing_event() const {
    activate();
    cudaEvent_t e = nullptr;
    FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));  // timing enabled
    return CudaEvent(e);
  }

  // Ties the GPU's event clock to the host's steady clock. An event on the private, otherwise idle
  // clock stream completes at once, so its GPU time lies between the host clock read before the
  // record and the one after the synchronize; the midpoint is off by at most half that interval
  // (microseconds). Redone whenever no stamp is outstanding (so once per traced step), because
  // cudaEventElapsedTime gives float milliseconds (~1 us resolution 10 s after the anchor, ~60 us
  // after 1000 s) and the two clocks drift apart. Caller holds stamp_mutex_.
  void anchor_clock() {
    if (clock_stream_.get() == nullptr) {
      activate();
      cudaStream_t s = nullptr;
      FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      clock_stream_ = CudaStream(s);
      anchor_event_ = make_timing_event();
    }
    const double before = steady_seconds();
    FERRY_CUDA_CHECK(cudaEventRecord(anchor_event_.get(), clock_stream_.get()));
    FERRY_CUDA_CHECK(cudaEventSynchronize(anchor_event_.get()));
    const double after = steady_seconds();
    anchor_seconds_ = 0.5 * (before + after);
  }

  void rethrow_host_task_error() {
    size_t dropped = 0;
    std::exception_ptr error = errors_.take(&dropped);
    if (!error) return;
    if (dropped > 0)
      log_warn("[{}] {} more error(s) in host tasks after the one rethrown now", where_, dropped);
    std::rethrow_exception(error);
  }

  // A failed cudaHostRegister of `bytes` (admitted): cancelled, and the error says what to do.
  [[noreturn]] void refuse_registration(size_t bytes, const char* what, cudaError_t status) {
    pinned_.cancel(bytes);
    (void)cudaGetLastError();
    fail(
        where_.c_str(),
        "cudaHostRegister of {} for {} failed: {} ({} pinned already); plan for less pinned memory (or raise "
        "the locked-memory limit, ulimit -l)",
        format_bytes(bytes), what ? what : "?", cudaGetErrorString(status),
        format_bytes(pinned_.stats().in_use));
  }

  // A block of allocate_pinned's: mapped, committed on the pool, registered (admitted already;
  // cancelled here on failure).
  void* map_pinned(size_t bytes, const char* what) {
    const HostPages pages = map_host_pages(bytes);
    const int error = pages.data == nullptr ? errno : commit_host_pages(pages, ThreadPool::global());
    if (error != 0) {
      unmap_host_pages(pages);
      pinned_.cancel(bytes);
      fail(where_.c_str(),
           "the host could not map and commit {} of pinned memory for {} ({}; {} pinned already); plan for "
           "less pinned memory",
           format_bytes(bytes), what ? what : "?", std::strerror(error),
           format_bytes(pinned_.stats().in_use));
    }
    const cudaError_t status = cudaHostRegister(pages.data, pages.mapped, cudaHostRegisterPortable);
    if (status != cudaSuccess) {
      unmap_host_pages(pages);
      refuse_registration(bytes, what, status);
    }
    std::lock_guard<std::mutex> lock(mapped_mutex_);
    mapped_[pages.data] = pages;
    return pages.data;
  }

  void* host_alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (status != cudaSuccess) {
      pinned_.cancel(bytes);
      (void)cudaGetLastError();
      fail(where_.c_str(),
           "cudaHostAlloc of {} for {} failed: {} ({} pinned already); plan for less pinned memory",
           format_bytes(bytes), what ? what : "?", cudaGetErrorString(status),
           format_bytes(pinned_.stats().in_use));
    }
    return p;
  }

  // Either kind of allocate_pinned's blocks; `check` raises a failure (not at destruction).
  void free_pinned(void* pointer, bool check) {
    HostPages pages;
    {
      std::lock_guard<std::mutex> lock(mapped_mutex_);
      const auto it = mapped_.find(pointer);
      if (it != mapped_.end()) {
        pages = it->second;
        mapped_.erase(it);
      }
    }
    if (pages.data == nullptr) {
      const cudaError_t status = cudaFreeHost(pointer);
      if (check) FERRY_CUDA_CHECK(status);
      return;
    }
    const cudaError_t status = cudaHostUnregister(pages.data);
    unmap_host_pages(pages);
    if (check) FERRY_CUDA_CHECK(status);
  }

  const int index_;
  const size_t free_when_opened_;
  const std::string where_;
  std::string name_;
  MemoryLedger memory_;
  MemoryLedger pinned_;
  std::mutex mapped_mutex_;
  std::unordered_map<void*, HostPages> mapped_;  // allocate_pinned's mapped blocks
  AsyncError errors_;
  std::array<CudaStream, kStreamCount> streams_;

  std::mutex event_mutex_;
  std::deque<CudaEvent> live_events_;  // live_events_[i] is EventId first_live_ + i
  EventId first_live_ = 1;
  std::vector<CudaEvent> free_events_;

  // Timeline stamps: timing-enabled events of their own, kept until taken.
  std::mutex stamp_mutex_;
  std::unordered_map<StampId, CudaEvent> stamps_;
  std::vector<CudaEvent> free_stamps_;
  StampId next_stamp_ = 1;
  CudaStream clock_stream_;
  CudaEvent anchor_event_;
  double anchor_seconds_ = 0.0;  // steady_seconds() at which anchor_event_ completed
};

}  // namespace

bool cuda_available() {
  return cuda_device_count() > 0;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Device> make_cuda_device(int index, size_t memory_capacity) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cuda", "no usable CUDA GPU: {} ({}); train on the CPU backend or check the driver",
         cudaGetErrorName(status), cudaGetErrorString(status));
  }
  FERRY_CHECK(index >= 0 && index < count, "cuda", "there is no GPU {}: this host has {}", index, count);
  FERRY_CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0, total_bytes = 0;
  FERRY_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (memory_capacity == 0) {
    memory_capacity = free_bytes;
  } else if (memory_capacity > free_bytes) {
    log_warn(
        "[cuda device {}] the memory budget {} exceeds the {} free on the card; allocations past that fail",
        index, format_bytes(memory_capacity), format_bytes(free_bytes));
  }
  return std::make_unique<CudaDevice>(index, memory_capacity, free_bytes);
}

}  // namespace ferry
