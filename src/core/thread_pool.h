// A persistent pool of worker threads with a static, deterministic partition of work.
//
// The same range is always cut into the same pieces for the same thread count, so results that
// depend on summation order are reproducible run to run. An exception thrown by a worker is
// carried to the calling thread and rethrown there.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread, or as many as can be started (with a warning)
  // where a process limit allows fewer. A count that cannot be started is a ferry::Error.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls body(begin, end) on contiguous pieces of [0, count) in parallel and waits for all.
  // Pieces hold at least `grain` items. The calling thread takes part.
  void parallel_for(size_t count, const std::function<void(size_t, size_t)>& body, size_t grain = 1);

  // Runs body(piece, pieces) on every thread, piece = 0..pieces-1.
  void run_on_all(const std::function<void(size_t, size_t)>& body);

  // The process-wide pool used by the CPU ops and the CPU optimizer.
  static ThreadPool& global();
  // Sets the size of the global pool; takes effect when global() is first called.
  static void set_global_threads(size_t threads);

 private:
  void worker_loop(size_t index);
  // Wakes every worker to exit and joins it.
  void stop();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t pieces_ = 0;
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::mutex run_mutex_;  // one job at a time
};

}  // namespace ferry
