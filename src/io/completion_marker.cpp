#include "io/completion_marker.h"

#include <system_error>

#include "core/error.h"
#include "io/atomic_file.h"

namespace ferry {

void mark_complete(const std::filesystem::path& dir) {
  // The files' renames must be on disk before the marker's, or a crash could keep the marker
  // and lose a rename.
  sync_directory(dir);
  write_file_atomic(dir / kCompleteMarker, "complete\n");
}

bool is_marked_complete(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / kCompleteMarker, ec);
}

void unmark_complete(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::remove(dir / kCompleteMarker, ec)) {
    FERRY_CHECK(!ec, "io", "{}: cannot remove the completion marker: {}; check the directory's permissions",
                (dir / kCompleteMarker).string(), ec.message());
    return;
  }
  sync_directory(dir);
}

}  // namespace ferry
