#include "io/filesystem_id.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ferry {

std::string filesystem_id(const std::filesystem::path& dir) {
  struct stat st {};
  struct statfs fs {};
  FERRY_CHECK(::stat(dir.c_str(), &st) == 0 && ::statfs(dir.c_str(), &fs) == 0, "disk tier",
              "cannot read which filesystem {} is on: {}; give a directory that exists", dir.string(),
              std::strerror(errno));
  unsigned words[2];
  static_assert(sizeof(words) == sizeof(fs.f_fsid));
  std::memcpy(words, &fs.f_fsid, sizeof(words));
  return fmt::format("dev-{:x}-{:x}-fs-{:x}-{:08x}{:08x}", major(st.st_dev), minor(st.st_dev),
                     static_cast<unsigned long>(fs.f_type), words[0], words[1]);
}

}  // namespace ferry
