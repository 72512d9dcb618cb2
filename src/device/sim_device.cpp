#include "device/sim_device.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

constexpr size_t kAlignment = 64;
constexpr const char* kWhere = "sim device";
const char* const kStreamNames[kStreamCount] = {"compute", "h2d", "d2h", "bulk-h2d", "bulk-d2h"};

// Set on a stream's worker thread: work running there must not issue work to the device.
thread_local bool t_on_stream_thread = false;

// An EventId packs the stream and the 1-based number of the record on that stream.
EventId encode_event(int stream, uint64_t sequence) {
  return static_cast<EventId>(sequence) * kStreamCount + stream;
}
void decode_event(EventId event, int* stream, uint64_t* sequence) {
  FERRY_ASSERT(event >= kStreamCount, "not an event of this device");
  *stream = static_cast<int>(event % kStreamCount);
  *sequence = static_cast<uint64_t>(event / kStreamCount);
}

size_t host_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return size_t{1} << 40;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

// Fresh memory is poisoned with 0xFF bytes (NaN in fp32 and bf16), so that a read before the
// engine's write shows in the results. Blocks of many pages are filled by several threads: the
// fill is the first touch of every page (4 GiB: 12.4 s on one thread of a 2-core VM, 6.9 s on two).
void poison(char* p, size_t bytes) {
  constexpr size_t kBytesPerThread = size_t{256} << 20;
  const size_t wanted = (bytes + kBytesPerThread - 1) / kBytesPerThread;
  const size_t threads = std::min<size_t>(wanted, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    std::memset(p, 0xFF, bytes);
    return;
  }
  const size_t piece = (bytes + threads - 1) / threads;
  const auto fill = [p, piece, bytes](size_t t) {
    const size_t begin = std::min(bytes, t * piece);
    std::memset(p + begin, 0xFF, std::min(bytes, begin + piece) - begin);
  };
  // Pieces 1.. go to threads of their own while threads can be started (a process limit may
  // refuse one); the calling thread fills piece 0 and any piece no thread took.
  std::vector<std::thread> fillers;
  fillers.reserve(threads);
  size_t handed_out = 1;
  try {
    for (; handed_out < threads; ++handed_out) fillers.emplace_back(fill, handed_out);
  } catch (const std::system_error&) {
  }
  fill(0);
  for (size_t t = handed_out; t < threads; ++t) fill(t);
  for (auto& filler : fillers) filler.join();
}

void* aligned_block(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p != nullptr) poison(static_cast<char*>(p), rounded);
  return p;
}

int stream_index(StreamKind stream) {
  const int s = static_cast<int>(stream);
  FERRY_ASSERT(s >= 0 && s < kStreamCount, "unknown stream");
  return s;
}

}  // namespace

// A worker thread running its tasks in the order they were pushed. The destructor lets it finish
// every task already queued.
class SimDevice::Stream {
 public:
  explicit Stream(int index) : thread_([this, index] { loop(index); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Tasks must not throw (the device wraps work that may).
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_one();
  }
  // Numbers the record and queues its completion under one lock, so numbers follow queue order.
  uint64_t push_record(const std::function<void(uint64_t)>& complete) {
    uint64_t sequence;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sequence = ++records_;
      queue_.push_back([complete, sequence] { complete(sequence); });
    }
    wake_.notify_one();
    return sequence;
  }
  uint64_t records_issued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_;
  }

 private:
  void loop(int index) {
    pthread_setname_np(pthread_self(), (std::string("ferry-") + kStreamNames[index]).c_str());
    t_on_stream_thread = true;
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  uint64_t records_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

SimDevice::SimDevice(const SimDeviceOptions& options)
    : options_(options),
      memory_(kWhere, "memory", options.memory_capacity),
      pinned_(kWhere, "pinned memory", host_ram_bytes()) {
  FERRY_CHECK(options.h2d_bytes_per_second >= 0.0 && options.d2h_bytes_per_second >= 0.0 &&
                  options.copy_latency_seconds >= 0.0,
              kWhere, "bandwidths and latency must be >= 0 (0: no slowdown)");
  for (int s = 0; s < kStreamCount; ++s) streams_[s] = std::make_unique<Stream>(s);
}

SimDevice::~SimDevice() {
  for (auto& stream : streams_) stream.reset();  // each drains its queue first
  size_t dropped = 0;
  if (std::exception_ptr error = errors_.take(&dropped)) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      log_warn("[{}] an error on a stream was never collected by synchronize: {}", kWhere, e.what());
    } catch (...) {
      log_warn("[{}] an error on a stream was never collected by synchronize", kWhere);
    }
  }
  for (auto* ledger : {&memory_, &pinned_}) {
    for (const auto& [pointer, what, origin] : ledger->blocks()) {
      ledger->forget(pointer, origin);
      if (origin == BlockOrigin::Registered) continue;  // not ours to free
      log_debug("[{}] freeing {} still allocated at destruction", kWhere, what);
      std::free(pointer);
    }
  }
}

void* SimDevice::allocate(size_t bytes, const char* what) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (bytes == 0) return nullptr;
  memory_.admit(bytes, what);
  void* p = aligned_block(bytes);
  if (p == nullptr) {
    memory_.cancel(bytes);
    fail(kWhere, "the host could not provide {} for {}", format_bytes(bytes), what);
  }
  memory_.record(p, bytes, what);
  return p;
}

void SimDevice::release(void* pointer) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (pointer == nullptr) return;
  memory_.forget(pointer);
  std::free(pointer);
}

void* SimDevice::allocate_pinned(size_t bytes, const char* what) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (bytes == 0) return nullptr;
  pinned_.admit(bytes, what);
  void* p = aligned_block(bytes);
  if (p == nullptr) {
    pinned_.cancel(bytes);
    fail(kWhere, "the host could not provide {} of pinned memory for {}", format_bytes(bytes), what);
  }
  pinned_.record(p, bytes, what);
  return p;
}

void SimDevice::release_pinned(void* pointer) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (pointer == nullptr) return;
  pinned_.forget(pointer);
  std::free(pointer);
}

void SimDevice::register_pinned(void* pointer, size_t bytes, const char* what) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (pointer == nullptr || bytes == 0) return;
  pinned_.admit(bytes, what);
  pinned_.record(pointer, bytes, what, BlockOrigin::Registered);
}

void SimDevice::unregister_pinned(void* pointer) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  if (pointer == nullptr) return;
  pinned_.forget(pointer, BlockOrigin::Registered);
}

void SimDevice::check_device_range(const void* pointer, size_t bytes, const char* op,
                                   const char* role) const {
  FERRY_CHECK(memory_.contains(pointer, bytes), kWhere,
              "{}: the {} ({} at {}) is not inside one allocation of this device", op, role,
              format_bytes(bytes), pointer);
}

void SimDevice::check_host_range(const void* pointer, size_t bytes, const char* op, const char* role) const {
  FERRY_CHECK(!options_.require_pinned_host || pinned_.contains(pointer, bytes) ||
                  (options_.pinned_elsewhere && options_.pinned_elsewhere(pointer, bytes)),
              kWhere,
              "{}: the {} ({} at {}) is not inside pinned memory of this device (or of its group); "
              "allocate it with allocate_pinned",
              op, role, format_bytes(bytes), pointer);
}

void SimDevice::timed_copy(StreamKind stream, void* dst, const void* src, size_t bytes,
                           double bytes_per_second) const {
  // The bytes land when the modelled transfer ends, so that work which reads them without waiting for
  // the copy's event reads what was there before (poison, for fresh memory) and the test fails.
  double seconds = options_.copy_latency_seconds;
  if (bytes_per_second > 0.0) seconds += static_cast<double>(bytes) / bytes_per_second;
  if (seconds > 0.0) {
    if (options_.copy_wait)
      options_.copy_wait(stream, seconds);
    else
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
  std::memcpy(dst, src, bytes);
}

void SimDevice::enqueue(StreamKind stream, std::function<void()> work) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  streams_[stream_index(stream)]->push([this, work = std::move(work)] {
    try {
      work();
    } catch (...) {
      errors_.store(std::current_exception());
    }
  });
}

void SimDevice::copy_to_device(void* device_dst, const void* host_src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return;
  check_device_range(device_dst, bytes, "copy_to_device", "destination");
  check_host_range(host_src, bytes, "copy_to_device", "source");
  const double rate = options_.h2d_bytes_per_second;
  enqueue(stream, [this, stream, device_dst, host_src, bytes, rate] {
    timed_copy(stream, device_dst, host_src, bytes, rate);
  });
}

void SimDevice::copy_to_host(void* host_dst, const void* device_src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return;
  check_device_range(device_src, bytes, "copy_to_host", "source");
  check_host_range(host_dst, bytes, "copy_to_host", "destination");
  const double rate = options_.d2h_bytes_per_second;
  enqueue(stream, [this, stream, host_dst, device_src, bytes, rate] {
    timed_copy(stream, host_dst, device_src, bytes, rate);
  });
}

void SimDevice::copy_on_device(void* dst, const void* src, size_t bytes, StreamKind stream) {
  if (bytes == 0) return;
  check_device_range(dst, bytes, "copy_on_device", "destination");
  check_device_range(src, bytes, "copy_on_device", "source");
  enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void SimDevice::fill_zero(void* device_dst, size_t bytes, StreamKind stream) {
  if (bytes == 0) return;
  check_device_range(device_dst, bytes, "fill_zero", "destination");
  enqueue(stream, [device_dst, bytes] { std::memset(device_dst, 0, bytes); });
}

void SimDevice::host_task(StreamKind stream, std::function<void()> fn) {
  FERRY_ASSERT(fn != nullptr);
  enqueue(stream, std::move(fn));
}

EventId SimDevice::record(StreamKind stream) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  const int s = stream_index(stream);
  const uint64_t sequence = streams_[s]->push_record([this, s](uint64_t done) {
    {
      std::lock_guard<std::mutex> lock(event_mutex_);
      completed_[s] = done;
    }
    event_done_.notify_all();
  });
  return encode_event(s, sequence);
}

bool SimDevice::event_complete(int stream, uint64_t sequence) {
  std::lock_guard<std::mutex> lock(event_mutex_);
  return completed_[stream] >= sequence;
}

void SimDevice::wait_for_event(int stream, uint64_t sequence) {
  std::unique_lock<std::mutex> lock(event_mutex_);
  event_done_.wait(lock, [&] { return completed_[stream] >= sequence; });
}

void SimDevice::wait(StreamKind stream, EventId event) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  int source;
  uint64_t sequence;
  decode_event(event, &source, &sequence);
  // An event is recorded before anyone can wait for it, so waits cannot form a cycle.
  FERRY_ASSERT(sequence <= streams_[source]->records_issued(), "wait for an event that was never recorded");
  const int s = stream_index(stream);
  if (source == s || event_complete(source, sequence)) return;  // already ordered, or already done
  streams_[s]->push([this, source, sequence] { wait_for_event(source, sequence); });
}

void SimDevice::synchronize(EventId event) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  int source;
  uint64_t sequence;
  decode_event(event, &source, &sequence);
  FERRY_ASSERT(sequence <= streams_[source]->records_issued(),
               "synchronize on an event that was never recorded");
  wait_for_event(source, sequence);
  rethrow_stream_error();
}

void SimDevice::synchronize_all() {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  std::array<EventId, kStreamCount> events;
  for (int s = 0; s < kStreamCount; ++s) events[s] = record(static_cast<StreamKind>(s));
  for (int s = 0; s < kStreamCount; ++s) {
    int source;
    uint64_t sequence;
    decode_event(events[s], &source, &sequence);
    wait_for_event(source, sequence);
  }
  rethrow_stream_error();
}

StampId SimDevice::record_stamp(StreamKind stream) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  const int s = stream_index(stream);
  StampId id;
  {
    std::lock_guard<std::mutex> lock(event_mutex_);
    id = next_stamp_++;
    stamps_.emplace(id, std::numeric_limits<double>::quiet_NaN());
  }
  streams_[s]->push([this, id] {
    const double now = steady_seconds();
    {
      std::lock_guard<std::mutex> lock(event_mutex_);
      stamps_[id] = now;
    }
    event_done_.notify_all();
  });
  return id;
}

double SimDevice::take_stamp(StampId stamp) {
  FERRY_ASSERT(!t_on_stream_thread, "device work issued from a host task");
  std::unique_lock<std::mutex> lock(event_mutex_);
  auto it = stamps_.find(stamp);
  FERRY_ASSERT(it != stamps_.end(), "a stamp that was never recorded, or was taken already");
  const double& seconds = it->second;  // references survive rehashing (iterators may not)
  event_done_.wait(lock, [&] { return !std::isnan(seconds); });
  const double result = seconds;
  stamps_.erase(stamp);
  return result;
}

void SimDevice::rethrow_stream_error() {
  size_t dropped = 0;
  std::exception_ptr error = errors_.take(&dropped);
  if (!error) return;
  if (dropped > 0) log_warn("[{}] {} more error(s) on streams after the one rethrown now", kWhere, dropped);
  std::rethrow_exception(error);
}

std::unique_ptr<Device> make_sim_device(const SimDeviceOptions& options) {
  return std::make_unique<SimDevice>(options);
}

std::vector<std::unique_ptr<Device>> make_sim_devices(int count, const SimDeviceOptions& options) {
  FERRY_CHECK(count >= 1, kWhere, "a group of {} simulated devices: give 1 or more", count);
  // Filled once every device exists; each device's check reads it only when a copy is issued.
  auto group = std::make_shared<std::vector<const SimDevice*>>();
  std::vector<std::unique_ptr<Device>> devices;
  for (int r = 0; r < count; ++r) {
    SimDeviceOptions o = options;
    o.index = r;
    o.pinned_elsewhere = [group, r](const void* pointer, size_t bytes) {
      for (size_t q = 0; q < group->size(); ++q)
        if (static_cast<int>(q) != r && (*group)[q]->holds_pinned(pointer, bytes)) return true;
      return false;
    };
    auto device = std::make_unique<SimDevice>(o);
    group->push_back(device.get());
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace ferry
