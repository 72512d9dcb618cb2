#include "core/log.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "core/error.h"

namespace ferry {

std::optional<LogLevel> parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warn") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  if (name == "off") return LogLevel::Off;
  return std::nullopt;
}

namespace {

// stderr's level: FERRY_LOG_LEVEL, else info. A value it does not know is said once and ignored:
// a log setting should not stop a run.
LogLevel level_from_environment() {
  const char* value = std::getenv("FERRY_LOG_LEVEL");
  if (value == nullptr || *value == '\0') return LogLevel::Info;
  if (const std::optional<LogLevel> level = parse_log_level(value)) return *level;
  std::fprintf(stderr,
               "ferry: FERRY_LOG_LEVEL=%s is not one of debug, info, warn, error, off; logging at info\n",
               value);
  return LogLevel::Info;
}

std::atomic<LogLevel> g_level{level_from_environment()};
std::mutex g_mutex;
std::atomic<std::FILE*> g_file{nullptr};  // the open LogFile's, written under g_mutex
const auto g_start = std::chrono::steady_clock::now();
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}
LogLevel log_level() {
  return g_level.load();
}

bool log_enabled(LogLevel level) {
  return level >= g_level.load() ||
         (level >= LogLevel::Info && level != LogLevel::Off && g_file.load() != nullptr);
}

void log_line(LogLevel level, const std::string& message) {
  static const char* const kTags[] = {"debug", "info", "warn", "error", ""};
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (level >= g_level.load())
    std::fprintf(stderr, "[%8.2fs %s] %s\n", seconds, kTags[static_cast<int>(level)], message.c_str());
  std::FILE* file = g_file.load();
  if (file != nullptr && level >= LogLevel::Info) {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &utc);
    std::fprintf(file, "%s [%8.2fs %s] %s\n", stamp, seconds, kTags[static_cast<int>(level)],
                 message.c_str());
    std::fflush(file);  // a run that dies still leaves its last lines
  }
}

LogFile::LogFile(const std::filesystem::path& path, bool append) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  FERRY_CHECK(file_ != nullptr, "log", "cannot open the log file {}: {}", path.string(),
              std::strerror(errno));
  std::lock_guard<std::mutex> lock(g_mutex);
  std::FILE* expected = nullptr;
  if (!g_file.compare_exchange_strong(expected, file_)) {
    std::fclose(file_);
    file_ = nullptr;
    fail("log", "a log file is open already; {} cannot be opened beside it", path.string());
  }
}

LogFile::~LogFile() {
  if (file_ == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_file = nullptr;
  std::fclose(file_);
}

}  // namespace ferry
