// Logging to stderr with a level and a timestamp: info and above unless FERRY_LOG_LEVEL in the
// environment says otherwise (debug, info, warn, error or off). While a LogFile is open, info
// lines and above also go to its file (a run's train.log), whatever stderr's level.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "core/log_line.h"

namespace ferry {

// Writes every logged line of level info and above to `path` while it lives, each with the UTC
// date and time; `append` keeps what the file holds (a resumed run's log goes on), else it starts
// empty. One at a time; opening a second while one is open is an error.
class LogFile {
 public:
  LogFile(const std::filesystem::path& path, bool append);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

 private:
  std::FILE* file_ = nullptr;
};

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::Info)) log_line(LogLevel::Info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::Warn)) log_line(LogLevel::Warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::Debug))
    log_line(LogLevel::Debug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ferry
