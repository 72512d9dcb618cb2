#include "core/env_switch.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace ferry {

std::optional<bool> parse_env_switch(std::string_view value) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "0" || lower == "off" || lower == "false" || lower == "no") return false;
  if (lower.empty() || lower == "1" || lower == "on" || lower == "true" || lower == "yes") return true;
  return std::nullopt;
}

bool env_switch_on(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return true;
  if (const std::optional<bool> on = parse_env_switch(value)) return *on;
  // Said once per variable: some switches are read on every call of an op. Straight to stderr,
  // not through the log, whose own settings may not be read yet where a switch is read at start.
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(name).second)
    std::fprintf(stderr,
                 "ferry: %s=%s is not one of 0, off, false, no (off) or 1, on, true, yes (on); it stays on\n",
                 name, value);
  return true;
}

}  // namespace ferry
