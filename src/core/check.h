// The part of the error policy that CUDA translation units can include: no fmt, no iostreams.
//
// * ferry::raise throws ferry::Error ("[where] what"); for users' mistakes and bad files.
// * FERRY_ASSERT checks our own invariants; a failure aborts with the expression, file and line.
#pragma once

#include <stdexcept>
#include <string>

namespace ferry {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void raise(const std::string& where, const std::string& what);
[[noreturn]] void assertion_failed(const char* expression, const char* file, int line,
                                   const std::string& note);

}  // namespace ferry

#define FERRY_ASSERT(condition, ...)                                                             \
  do {                                                                                           \
    if (!(condition)) ::ferry::assertion_failed(#condition, __FILE__, __LINE__, "" __VA_ARGS__); \
  } while (0)
