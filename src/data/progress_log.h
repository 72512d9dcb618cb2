// Progress of long data work (tokenizing, parsing) in the log: silence of minutes looks like a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "core/log.h"

namespace ferry {

// "data: big.jsonl: 2000000 records (messages): 450000 done (22%), 12s" every few seconds, and a
// closing line when the work took long enough to have reported at all. Cheap to update often.
class ProgressLog {
 public:
  explicit ProgressLog(std::string what) : what_(std::move(what)), start_(Clock::now()), last_(start_) {}
  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;
  ~ProgressLog() {
    if (reported_) log_info("{}: done in {:.0f}s", what_, seconds_since(start_));
  }

  // `done` of `total` units (total 0: unknown).
  void update(size_t done, size_t total) {
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(kEverySeconds)) return;
    last_ = now;
    reported_ = true;
    if (total > 0)
      log_info("{}: {} done ({:.0f}%), {:.0f}s", what_, done,
               100.0 * static_cast<double>(done) / static_cast<double>(total), seconds_since(start_));
    else
      log_info("{}: {} done, {:.0f}s", what_, done, seconds_since(start_));
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kEverySeconds = 5;
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  std::string what_;
  Clock::time_point start_, last_;
  bool reported_ = false;
};

}  // namespace ferry
