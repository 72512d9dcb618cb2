#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <system_error>

#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {
std::atomic<size_t> g_global_threads{0};
}

ThreadPool::ThreadPool(size_t threads) {
  const bool one_per_core = threads == 0;
  if (one_per_core) threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  workers_.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) {
    try {
      workers_.emplace_back([this, i] { worker_loop(i); });
    } catch (const std::system_error& e) {
      // A process limit (RLIMIT_NPROC, a container's pids.max) or memory for the stacks. The
      // default adapts to what the machine gives; a count the user asked for is refused, and the
      // workers started so far are stopped first (leaving them joinable would terminate).
      if (one_per_core) {
        log_warn("[threads] only {} of {} threads could be started ({}); continuing with {}", i, threads,
                 e.what(), i);
        return;
      }
      stop();
      fail("threads",
           "could not start thread {} of the {} asked for ({}); the process limit (ulimit -u, a container's "
           "pids "
           "limit) or memory allows fewer: set threads to at most {}, or 0 for one per core",
           i + 1, threads, e.what(), i);
    }
  }
}

ThreadPool::~ThreadPool() {
  stop();
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* job;
    size_t pieces;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
      pieces = pieces_;
    }
    if (index < pieces) {
      try {
        (*job)(index, pieces);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(size_t, size_t)>& body) {
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  const size_t pieces = size();
  if (workers_.empty()) {
    body(0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &body;
    pieces_ = pieces;
    pending_ = workers_.size();
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr local;
  try {
    body(0, pieces);
  } catch (...) {
    local = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (local) std::rethrow_exception(local);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(size_t count, const std::function<void(size_t, size_t)>& body, size_t grain) {
  if (count == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t max_pieces = (count + grain - 1) / grain;
  const size_t pieces = std::min(size(), max_pieces);
  if (pieces <= 1) {
    body(0, count);
    return;
  }
  run_on_all([&](size_t piece, size_t) {
    if (piece >= pieces) return;
    const size_t begin = count * piece / pieces;
    const size_t end = count * (piece + 1) / pieces;
    if (begin < end) body(begin, end);
  });
}

void ThreadPool::for_each_piece(size_t pieces, const std::function<void(size_t)>& body) {
  if (pieces == 0) return;
  if (pieces == 1 || workers_.empty()) {
    for (size_t k = 0; k < pieces; ++k) body(k);
    return;
  }
  std::atomic<size_t> next{0};
  run_on_all([&](size_t, size_t) {
    for (size_t k = next.fetch_add(1, std::memory_order_relaxed); k < pieces;
         k = next.fetch_add(1, std::memory_order_relaxed))
      body(k);
  });
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_global_threads.load());
  return pool;
}

void ThreadPool::set_global_threads(size_t threads) {
  g_global_threads = threads;
}

}  // namespace ferry
