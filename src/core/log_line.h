// The log's levels and its one-line writer, without the formatting templates of core/log.h: for
// code that fmt's headers do not compile in (CUDA sources), which builds its lines itself.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ferry {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

// "debug", "info", "warn", "error" or "off"; nothing for anything else.
std::optional<LogLevel> parse_log_level(std::string_view name);
void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);
// Whether a line of `level` goes anywhere (stderr or an open LogFile).
bool log_enabled(LogLevel level);

}  // namespace ferry
