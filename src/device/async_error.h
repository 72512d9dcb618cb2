// The first exception thrown by work that ran off the host's thread (a host task on a stream), kept
// until the host collects it at its next synchronize (mlx's scheduler check_error habit): an error
// is never lost and never crashes a worker. Later errors before the collection are counted.
#pragma once

#include <cstddef>
#include <exception>
#include <mutex>

namespace ferry {

class AsyncError {
 public:
  // Called on the worker thread, inside the catch block.
  void store(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_)
      error_ = std::move(error);
    else
      ++dropped_;
  }
  // Hands the kept exception over (null when there is none) and clears it; `dropped` receives the
  // number of later errors that were not kept.
  std::exception_ptr take(size_t* dropped) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    *dropped = dropped_;
    dropped_ = 0;
    return error;
  }
  bool pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_ != nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  size_t dropped_ = 0;
};

}  // namespace ferry
