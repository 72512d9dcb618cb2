#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace ferry {

void raise(const std::string& where, const std::string& what) {
  throw Error("[" + where + "] " + what);
}

void assertion_failed(const char* expression, const char* file, int line, const std::string& note) {
  std::fprintf(stderr, "ferry: internal error: assertion `%s` failed at %s:%d%s%s\n", expression, file, line,
               note.empty() ? "" : ": ", note.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace ferry
