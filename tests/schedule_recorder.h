// A Device that passes everything to another and, while started, writes down every call that
// orders work: what is issued to each stream (copies, fills, host tasks, the trace's stamps), the
// events recorded and waited for, and the synchronizations of the host thread and of other threads
// (the CPU updater's worker waiting for a gradient to land). Placed under a TracingDevice and
// given to its Tracer, it sees each traced piece of work as the two stamps around it, so the k-th
// pair of stamps on a stream is the k-th span of that stream's track in the trace: the trace names
// the work (op and the engine's scope), the recorder says how the streams wait for each other.
#pragma once

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/device.h"
#include "device/trace/trace_span.h"
#include "device/trace/tracer.h"

namespace ferry::test {

class ScheduleRecorder final : public Device {
 public:
  enum class Call { Stamp, Record, Wait, Copy, Fill, HostTask, Synchronize };
  struct Entry {
    Call call = Call::Stamp;
    int stream = -1;     // StreamKind; -1 for Synchronize
    EventId event = -1;  // Record, Wait, Synchronize
    const void* dst = nullptr;
    const void* src = nullptr;
    size_t bytes = 0;
    bool on_host = true;   // Synchronize: called by the thread that started the recording
    size_t cpu_spans = 0;  // Synchronize from another thread: spans on the trace's CPU track by then
  };

  explicit ScheduleRecorder(Device& inner) : inner_(inner) {}

  // Records from now on; the calling thread is the host thread. `tracer` counts the CPU spans.
  void start(const Tracer& tracer) {
    std::lock_guard<std::mutex> lock(mutex_);
    tracer_ = &tracer;
    host_ = std::this_thread::get_id();
    recording_ = true;
  }
  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false;
  }
  std::vector<Entry> entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_;
  }
  // The pinned buffers allocated as `what`, in the order they were allocated (recording or not).
  std::vector<const void*> pinned(const std::string& what) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const void*> found;
    for (const auto& [pointer, name] : pinned_)
      if (name == what) found.push_back(pointer);
    return found;
  }

  std::string name() const override { return inner_.name(); }
  int index() const override { return inner_.index(); }
  void* allocate(size_t bytes, const char* what) override { return inner_.allocate(bytes, what); }
  void release(void* pointer) override { inner_.release(pointer); }
  MemoryStats memory() const override { return inner_.memory(); }
  size_t uncapped_memory() const override { return inner_.uncapped_memory(); }
  void* allocate_pinned(size_t bytes, const char* what) override {
    void* pointer = inner_.allocate_pinned(bytes, what);
    std::lock_guard<std::mutex> lock(mutex_);
    pinned_.emplace_back(pointer, what);
    return pointer;
  }
  void release_pinned(void* pointer) override { inner_.release_pinned(pointer); }
  void register_pinned(void* pointer, size_t bytes, const char* what) override {
    inner_.register_pinned(pointer, bytes, what);
  }
  void unregister_pinned(void* pointer) override { inner_.unregister_pinned(pointer); }
  MemoryStats pinned_memory() const override { return inner_.pinned_memory(); }

  void copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) override {
    log(make(Call::Copy, stream, -1, device_dst, host_src, bytes));
    inner_.copy_to_device(device_dst, host_src, bytes, stream);
  }
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) override {
    log(make(Call::Copy, stream, -1, host_dst, device_src, bytes));
    inner_.copy_to_host(host_dst, device_src, bytes, stream);
  }
  void copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) override {
    log(make(Call::Copy, stream, -1, dst, src, bytes));
    inner_.copy_on_device(dst, src, bytes, stream);
  }
  void fill_zero(void* device_dst, size_t bytes, StreamKind stream) override {
    log(make(Call::Fill, stream, -1, device_dst, nullptr, bytes));
    inner_.fill_zero(device_dst, bytes, stream);
  }
  void host_task(StreamKind stream, std::function<void()> fn) override {
    log(make(Call::HostTask, stream));
    inner_.host_task(stream, std::move(fn));
  }
  void* native_stream(StreamKind stream) override { return inner_.native_stream(stream); }

  EventId record(StreamKind stream) override {
    const EventId event = inner_.record(stream);
    log(make(Call::Record, stream, event));
    return event;
  }
  void wait(StreamKind stream, EventId event) override {
    log(make(Call::Wait, stream, event));
    inner_.wait(stream, event);
  }
  void synchronize(EventId event) override {
    Entry e;
    e.call = Call::Synchronize;
    e.event = event;
    const Tracer* tracer = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      e.on_host = std::this_thread::get_id() == host_;
      tracer = tracer_;
    }
    // A thread other than the host's is the CPU updater's worker: its spans so far place this
    // wait among its updates (it runs one thing at a time).
    if (!e.on_host && tracer != nullptr)
      for (const TraceSpan& span : tracer->spans()) e.cpu_spans += span.track == TraceTrack::CpuUpdate;
    log(e);
    inner_.synchronize(event);
  }
  void synchronize_all() override { inner_.synchronize_all(); }

  StampId record_stamp(StreamKind stream) override {
    log(make(Call::Stamp, stream));
    return inner_.record_stamp(stream);
  }
  double take_stamp(StampId stamp) override { return inner_.take_stamp(stamp); }

 private:
  static Entry make(Call call, StreamKind stream, EventId event = -1, const void* dst = nullptr,
                    const void* src = nullptr, size_t bytes = 0) {
    Entry e;
    e.call = call;
    e.stream = static_cast<int>(stream);
    e.event = event;
    e.dst = dst;
    e.src = src;
    e.bytes = bytes;
    return e;
  }
  void log(const Entry& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (recording_) entries_.push_back(e);
  }

  Device& inner_;
  mutable std::mutex mutex_;
  const Tracer* tracer_ = nullptr;
  std::thread::id host_;
  bool recording_ = false;
  std::vector<Entry> entries_;
  std::vector<std::pair<const void*, std::string>> pinned_;
};

}  // namespace ferry::test
