// A persistent pool of worker threads, with two ways to share out work:
//  * parallel_for: a static, deterministic partition. The same range is always cut into the same
//    pieces for the same thread count, so results that depend on summation order are reproducible
//    run to run.
//  * for_each_piece: the threads take pieces from a shared counter, so a thread slowed by other
//    work costs its share of the pieces, not the whole pass; for work whose result does not depend
//    on which thread does which piece.
// An exception thrown by a worker is carried to the calling thread and rethrown there.
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

  // Calls body(k) once for every k in [0, pieces) and waits for all. Each thread, the calling one
  // included, takes the next k from a shared counter until none is left: a thread that other work
  // slows (the engine's host thread, the CUDA driver, a busy hyperthread sibling) takes fewer
  // pieces instead of holding up the pass, as one static slice per thread would. The pieces should
  // be many more than the threads and each long enough to dwarf an atomic increment.
  void for_each_piece(size_t pieces, const std::function<void(size_t)>& body);

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
