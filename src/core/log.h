// Logging to stderr with a level and a timestamp. Quiet by default in tests.
#pragma once

#include <fmt/format.h>

#include <string>

namespace ferry {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::Info)
    log_line(LogLevel::Info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::Warn)
    log_line(LogLevel::Warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (log_level() <= LogLevel::Debug)
    log_line(LogLevel::Debug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ferry
