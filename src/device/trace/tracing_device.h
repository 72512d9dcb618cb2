// A Device that passes everything to another and, while a step is traced (device/trace/tracer.h),
// brackets each copy and fill with timeline stamps and times the host's waits, so the trace sees
// the h2d and d2h streams without the engine changing. Host tasks pass through untimed: the ops
// queued as host tasks are timed by TracingOps, one level up.
#pragma once

#include "device/device.h"
#include "device/trace/tracer.h"

namespace ferry {

class TracingDevice final : public Device {
 public:
  // Both must outlive this device.
  TracingDevice(Device& inner, Tracer& tracer) : inner_(inner), tracer_(tracer) {}

  std::string name() const override { return inner_.name(); }
  int index() const override { return inner_.index(); }

  void* allocate(size_t bytes, const char* what) override { return inner_.allocate(bytes, what); }
  void release(void* pointer) override { inner_.release(pointer); }
  MemoryStats memory() const override { return inner_.memory(); }
  size_t uncapped_memory() const override { return inner_.uncapped_memory(); }
  void* allocate_pinned(size_t bytes, const char* what) override {
    return inner_.allocate_pinned(bytes, what);
  }
  void release_pinned(void* pointer) override { inner_.release_pinned(pointer); }
  void register_pinned(void* pointer, size_t bytes, const char* what) override {
    inner_.register_pinned(pointer, bytes, what);
  }
  void unregister_pinned(void* pointer) override { inner_.unregister_pinned(pointer); }
  MemoryStats pinned_memory() const override { return inner_.pinned_memory(); }

  void copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) override;
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) override;
  void copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) override;
  void fill_zero(void* device_dst, size_t bytes, StreamKind stream) override;

  void host_task(StreamKind stream, std::function<void()> fn) override {
    inner_.host_task(stream, std::move(fn));
  }
  void* native_stream(StreamKind stream) override { return inner_.native_stream(stream); }

  EventId record(StreamKind stream) override { return inner_.record(stream); }
  void wait(StreamKind stream, EventId event) override { inner_.wait(stream, event); }
  void synchronize(EventId event) override;
  void synchronize_all() override;

  StampId record_stamp(StreamKind stream) override { return inner_.record_stamp(stream); }
  double take_stamp(StampId stamp) override { return inner_.take_stamp(stamp); }
  Tracer* tracer() override { return &tracer_; }

 private:
  Device& inner_;
  Tracer& tracer_;
};

}  // namespace ferry
