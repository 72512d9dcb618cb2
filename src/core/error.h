// One error policy for the whole project (DESIGN.md §6.5).
//
// * ferry::Error is for users' mistakes and bad files. Its message reads
//   "[where] what happened; what to do".
// * FERRY_ASSERT is for our own invariants: a failure is a bug in ferry, never the user's fault.
// core/check.h holds the fmt-free part, for CUDA translation units.
#pragma once

#include <fmt/format.h>

#include <string>

#include "core/check.h"

namespace ferry {

// Throws ferry::Error with "[where] " prefixed to the formatted message.
template <typename... Args>
[[noreturn]] void fail(const char* where, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("[{}] ", where) + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ferry

// Checks a condition that depends on user input; throws ferry::Error when it is false.
#define FERRY_CHECK(condition, where, ...)               \
  do {                                                   \
    if (!(condition)) ::ferry::fail(where, __VA_ARGS__); \
  } while (0)
