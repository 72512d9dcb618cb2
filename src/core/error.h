// One error policy for the whole project (DESIGN.md §6.5).
//
// * ferry::Error is for users' mistakes and bad files. Its message reads
//   "[where] what happened; what to do".
// * FERRY_ASSERT is for our own invariants: a failure is a bug in ferry, never the user's fault.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ferry {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws ferry::Error with "[where] " prefixed to the formatted message.
template <typename... Args>
[[noreturn]] void fail(const char* where, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("[{}] ", where) + fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void assertion_failed(const char* expression, const char* file, int line, const std::string& note);

}  // namespace ferry

// Checks a condition that depends on user input; throws ferry::Error when it is false.
#define FERRY_CHECK(condition, where, ...)         \
  do {                                              \
    if (!(condition)) ::ferry::fail(where, __VA_ARGS__); \
  } while (0)

// Checks an internal invariant; a failure aborts with the expression, file and line.
#define FERRY_ASSERT(condition, ...)                                                       \
  do {                                                                                     \
    if (!(condition)) ::ferry::assertion_failed(#condition, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)
