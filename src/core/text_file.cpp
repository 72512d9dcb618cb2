#include "core/text_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/error.h"

namespace ferry {

std::string read_text_file(const std::filesystem::path& path, const char* where, const char* hint) {
  // A stream opens a directory and reads it as empty text: the caller would then report an empty
  // or invalid file ("no model given", "not valid JSON") instead of the path that was meant.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail(where, "{} is a directory, not a file; {}", path.string(), hint);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(where, "cannot open {} ({}); {}", path.string(), errno ? std::strerror(errno) : "unknown reason",
         hint);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    fail(where, "reading {} failed ({}); {}", path.string(), errno ? std::strerror(errno) : "I/O error",
         hint);
  return text.str();
}

}  // namespace ferry
