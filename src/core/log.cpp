#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace ferry {

namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};
std::mutex g_mutex;
const auto g_start = std::chrono::steady_clock::now();
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}
LogLevel log_level() {
  return g_level.load();
}

void log_line(LogLevel level, const std::string& message) {
  static const char* const kTags[] = {"debug", "info", "warn", "error", ""};
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[%8.2fs %s] %s\n", seconds, kTags[static_cast<int>(level)], message.c_str());
}

}  // namespace ferry
