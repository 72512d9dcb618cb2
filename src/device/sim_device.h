// SimDevice: the Device of DESIGN.md §3 on the CPU, so that every schedule the engine can run is
// tested without a GPU, with a GPU's hazards made visible:
//
// * Each stream is a worker thread running its FIFO of tasks in issue order; streams run
//   concurrently (a copy on h2d overlaps a copy on d2h and the compute stream's host tasks).
// * An event is (stream, n): complete once the stream has run its n-th record. wait() enqueues a
//   task that blocks its stream until the event completes; synchronize() blocks the host.
// * Device memory is host memory (64-byte aligned) under a hard cap, with in-use and peak counters.
//   New blocks are filled with 0xFF bytes (NaN as f32 and bf16), as a GPU leaves fresh memory
//   undefined, so reading memory nobody wrote shows up instead of reading as zero.
// * Copies are memcpy on the stream's thread, slowed to the configured bandwidth and latency: the
//   thread sleeps for the copy's modelled time, then the bytes land, so the engine's overlap can be
//   seen and a reader that does not wait for the copy's event reads stale bytes.
//   Each copy and fill is checked to lie inside one device allocation, and (by default) its host
//   side inside pinned memory of this device.
// * An exception thrown by a host task is kept and rethrown by the next synchronize*() on the host;
//   the stream goes on with its next task, as a GPU stream would. Host tasks must not call back
//   into the device (checked).
// * A timeline stamp reads the host's steady clock on its stream's thread when the stream reaches
//   it, so SimDevice spans share the host clock exactly.
// * native_stream() is nullptr: ops reach the compute stream through host tasks (ops/queued_ops.h).
#pragma once

#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device/async_error.h"
#include "device/device.h"
#include "device/memory_ledger.h"

namespace ferry {

class SimDevice final : public Device {
 public:
  explicit SimDevice(const SimDeviceOptions& options);
  // Drains every stream, then frees what is still allocated.
  ~SimDevice() override;

  std::string name() const override { return "sim"; }
  int index() const override { return options_.index; }

  void* allocate(size_t bytes, const char* what) override;
  void release(void* pointer) override;
  MemoryStats memory() const override { return memory_.stats(); }
  size_t uncapped_memory() const override { return SimDeviceOptions{}.memory_capacity; }

  void* allocate_pinned(size_t bytes, const char* what) override;
  void release_pinned(void* pointer) override;
  void register_pinned(void* pointer, size_t bytes, const char* what) override;
  void unregister_pinned(void* pointer) override;
  MemoryStats pinned_memory() const override { return pinned_.stats(); }
  // Whether [pointer, pointer + bytes) lies inside pinned memory this device allocated or registered.
  bool holds_pinned(const void* pointer, size_t bytes) const { return pinned_.contains(pointer, bytes); }

  void copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) override;
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) override;
  void copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) override;
  void fill_zero(void* device_dst, size_t bytes, StreamKind stream) override;

  void host_task(StreamKind stream, std::function<void()> fn) override;
  void* native_stream(StreamKind) override { return nullptr; }

  EventId record(StreamKind stream) override;
  void wait(StreamKind stream, EventId event) override;
  void synchronize(EventId event) override;
  void synchronize_all() override;

  // A stamp is a task on its stream that reads the host clock when the stream reaches it.
  StampId record_stamp(StreamKind stream) override;
  double take_stamp(StampId stamp) override;

 private:
  class Stream;

  // Queues `work` on the stream; an exception it throws is kept for the next synchronize.
  void enqueue(StreamKind stream, std::function<void()> work);
  void check_device_range(const void* pointer, size_t bytes, const char* op, const char* role) const;
  void check_host_range(const void* pointer, size_t bytes, const char* op, const char* role) const;
  // Waits out latency + bytes / rate (SimDeviceOptions::copy_wait, or a sleep), then memcpy.
  void timed_copy(StreamKind stream, void* dst, const void* src, size_t bytes, double bytes_per_second) const;
  bool event_complete(int stream, uint64_t sequence);
  void wait_for_event(int stream, uint64_t sequence);
  void rethrow_stream_error();

  const SimDeviceOptions options_;
  MemoryLedger memory_;
  MemoryLedger pinned_;
  AsyncError errors_;

  std::mutex event_mutex_;
  std::condition_variable event_done_;
  std::array<uint64_t, kStreamCount> completed_{};  // last record each stream has run
  std::unordered_map<StampId, double> stamps_;      // recorded, not yet taken; NaN until passed
  StampId next_stamp_ = 1;

  std::array<std::unique_ptr<Stream>, kStreamCount> streams_;
};

}  // namespace ferry
