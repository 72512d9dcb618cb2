// The Device seam (DESIGN.md §3): everything the engine asks of an accelerator. The engine never
// calls CUDA; CudaDevice implements this with CUDA, SimDevice on the CPU (worker threads as
// streams, a hard memory cap, optional PCIe-like bandwidth and latency), so every schedule the
// engine can run is tested in CI without a GPU.
//
// Work is issued to streams and runs in issue order within a stream; streams are ordered with
// events. A host thread waits only where it must (reading a loss, a checkpoint).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ferry {

// The compute stream, the copy streams, and a second copy stream per direction for bulk copies
// (a layer's internals, ten boundaries' worth; the streamed optimizer state's pieces) that would
// otherwise queue in front of the weights and boundaries the next compute waits for; two streams of
// one direction share its link.
enum class StreamKind : int {
  Compute = 0,
  HostToDevice = 1,
  DeviceToHost = 2,
  BulkHostToDevice = 3,
  BulkDeviceToHost = 4,
};
constexpr int kStreamCount = 5;
// The streams collectives run on (the first three): the bulk copy streams have none.
constexpr int kCollectiveStreamCount = 3;

// An event recorded on a stream: complete once all work issued to that stream before it is done.
using EventId = int64_t;
// A timeline stamp (see record_stamp): like an event, but it keeps the time it completed.
using StampId = int64_t;

class Tracer;  // device/trace/tracer.h

struct MemoryStats {
  size_t capacity = 0;  // bytes the device may hold (the `gpu_memory` budget, or the card's)
  size_t in_use = 0;
  size_t peak = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Which accelerator of the host this is (several GPUs later).
  virtual int index() const = 0;
  // Makes this device the calling host thread's own (CUDA: cudaSetDevice), so that what the
  // thread issues next -- the ops' kernels, their libraries' handles -- goes to it. A thread that
  // drives one of several devices calls it first (engine/device_group_engine.h); a no-op where
  // streams are host threads.
  virtual void bind_thread() {}

  // Device memory. Allocation beyond the capacity throws ferry::Error with the numbers.
  // Planned resources are allocated once; nothing is allocated per step.
  virtual void* allocate(size_t bytes, const char* what) = 0;
  virtual void release(void* pointer) = 0;
  virtual MemoryStats memory() const = 0;
  // The capacity a device opened here without a budget (`gpu_memory` unset) gets: the card's free
  // memory when this one was opened (CUDA), the default capacity (simulated). What a profile
  // measured under a budget records beside it, so that a plan without one can still be made for the
  // whole card (`ferry plan profile=FILE`).
  virtual size_t uncapped_memory() const = 0;

  // Page-locked host memory for asynchronous copies (allocated once, at exact size).
  virtual void* allocate_pinned(size_t bytes, const char* what) = 0;
  virtual void release_pinned(void* pointer) = 0;
  // Page-locks host memory allocated elsewhere (cudaHostRegister), so that async copies may name
  // it: arrays that must keep their own layout (huge-page mappings the CPU streams through) and are
  // also copied to the device. Counted with pinned_memory() until unregister_pinned(pointer).
  virtual void register_pinned(void* pointer, size_t bytes, const char* what) = 0;
  virtual void unregister_pinned(void* pointer) = 0;
  // Pinned host memory held through this device (capacity: the sanity limit, the host's RAM).
  virtual MemoryStats pinned_memory() const = 0;

  // Asynchronous copies and fills on a stream. Host pointers of async copies must be pinned.
  virtual void copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) = 0;
  virtual void fill_zero(void* device_dst, size_t bytes, StreamKind stream) = 0;

  // Runs `fn` on a host thread once the stream reaches this point; later work on the stream waits
  // for it (cudaLaunchHostFunc). fn must not call back into the device. An exception thrown by fn
  // is kept and rethrown by the next synchronize*() on the host.
  virtual void host_task(StreamKind stream, std::function<void()> fn) = 0;

  // The backend's stream handle (cudaStream_t for CUDA), or nullptr where streams are host
  // threads (SimDevice); the ops layer uses it to launch kernels on the right stream.
  virtual void* native_stream(StreamKind stream) = 0;

  virtual EventId record(StreamKind stream) = 0;
  // Work issued to `stream` after this call starts after `event` completes.
  virtual void wait(StreamKind stream, EventId event) = 0;
  // Blocks the calling host thread until `event` completes.
  virtual void synchronize(EventId event) = 0;
  // Blocks until every stream is idle. Rethrows an error raised by work on any stream.
  virtual void synchronize_all() = 0;

  // Timeline stamps, for the trace (device/trace/tracer.h): a stamp completes where an event recorded
  // at the same point would, and remembers when. They are separate from events so that the
  // events the schedule waits on stay as cheap as the backend allows (CUDA: timing disabled);
  // nothing records a stamp unless a trace is being taken.
  virtual StampId record_stamp(StreamKind stream) = 0;
  // Seconds on std::chrono::steady_clock's time line (the host clock every trace span uses) at
  // which the stream passed the stamp; blocks until it has. Each stamp is taken once.
  virtual double take_stamp(StampId stamp) = 0;
  // The trace recorder that sees this device's work (a TracingDevice), or nullptr: engine code
  // names its work through it (TraceScope) without knowing whether a trace is taken.
  virtual Tracer* tracer() { return nullptr; }
};

// Seconds on std::chrono::steady_clock's time line: the clock of take_stamp() and of host spans.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// RAII ownership of device memory (kPinned = false) or pinned host memory (kPinned = true).
template <bool kPinned>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  OwnedBuffer(Device& device, size_t bytes, const char* what)
      : device_(&device),
        data_(kPinned ? device.allocate_pinned(bytes, what) : device.allocate(bytes, what)),
        bytes_(bytes) {}
  ~OwnedBuffer() { reset(); }
  OwnedBuffer(OwnedBuffer&& o) noexcept : device_(o.device_), data_(o.data_), bytes_(o.bytes_) {
    o.data_ = nullptr;
  }
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
    }
    return *this;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (data_ != nullptr) {
      if (kPinned)
        device_->release_pinned(data_);
      else
        device_->release(data_);
    }
    data_ = nullptr;
  }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = OwnedBuffer<false>;
using PinnedBuffer = OwnedBuffer<true>;

// RAII registration of host memory allocated elsewhere as pinned (Device::register_pinned): the
// memory must outlive it, so declare it after the owner of the memory.
class PinnedRegistration {
 public:
  PinnedRegistration() = default;
  PinnedRegistration(Device& device, void* pointer, size_t bytes, const char* what) {
    device.register_pinned(pointer, bytes, what);
    device_ = &device;
    pointer_ = pointer;
  }
  ~PinnedRegistration() { reset(); }
  PinnedRegistration(PinnedRegistration&& o) noexcept : device_(o.device_), pointer_(o.pointer_) {
    o.pointer_ = nullptr;
  }
  PinnedRegistration& operator=(PinnedRegistration&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      pointer_ = o.pointer_;
      o.pointer_ = nullptr;
    }
    return *this;
  }
  PinnedRegistration(const PinnedRegistration&) = delete;
  PinnedRegistration& operator=(const PinnedRegistration&) = delete;
  void reset() {
    if (pointer_ != nullptr) device_->unregister_pinned(pointer_);
    pointer_ = nullptr;
  }

 private:
  Device* device_ = nullptr;
  void* pointer_ = nullptr;
};

struct SimDeviceOptions {
  size_t memory_capacity = size_t{1} << 34;  // 16 GiB by default
  double h2d_bytes_per_second = 0.0;         // 0: as fast as memcpy
  double d2h_bytes_per_second = 0.0;
  double copy_latency_seconds = 0.0;
  // How a copy spends its modelled time (latency + bytes / rate, when above 0) on its stream's
  // thread before its bytes land: the thread sleeps when this is empty. A test gives a wait that
  // records the time asked for, or meets another stream's copy, so that what it asserts about the
  // emulation does not depend on how busy the machine is.
  std::function<void(StreamKind stream, double seconds)> copy_wait;
  // Copies between host and device must name pinned memory of this device on the host side, as
  // the interface asks (CUDA would silently stage pageable memory through a synchronous copy).
  bool require_pinned_host = true;
  // Which device of the host this is (Device::index).
  int index = 0;
  // Pinned memory of the other devices of a group (make_sim_devices) counts as pinned here too: a
  // group shares one host state, whose staging one device allocated and every device copies from,
  // as CUDA's pinned memory is usable by every GPU of the process.
  std::function<bool(const void* pointer, size_t bytes)> pinned_elsewhere;
};

// The CPU-backed device: streams are worker threads, memory is host memory under a hard cap.
std::unique_ptr<Device> make_sim_device(const SimDeviceOptions& options);
// `count` simulated devices of one host (indices 0..count-1), each with `options`, whose pinned
// memory each of them may copy from and to (SimDeviceOptions::pinned_elsewhere). Destroy them
// together.
std::vector<std::unique_ptr<Device>> make_sim_devices(int count, const SimDeviceOptions& options);
// The CUDA device `index`, memory capped at `memory_capacity` bytes (0: the card's free memory).
// Throws ferry::Error in a build without CUDA or when no GPU is present.
std::unique_ptr<Device> make_cuda_device(int index, size_t memory_capacity);
bool cuda_available();
// The GPUs this process sees (CUDA_VISIBLE_DEVICES applied); 0 without CUDA or a GPU.
int cuda_device_count();

}  // namespace ferry
