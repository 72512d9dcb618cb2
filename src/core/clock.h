// The steady clock as the logs and the profiles read it.
#pragma once

#include <chrono>

namespace ferry {

// Seconds on the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ferry
