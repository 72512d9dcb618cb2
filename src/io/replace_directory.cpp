#include "io/replace_directory.h"

#include <fmt/format.h>

#include <system_error>
#include <utility>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/completion_marker.h"

namespace ferry {

namespace {

namespace fs = std::filesystem;

fs::path with_suffix(const fs::path& dir, const char* suffix) {
  fs::path p = dir;
  p += suffix;
  return p;
}

// The names a replacement writes the new directory under and sets the old one aside under.
constexpr const char* kStagedSuffix = ".tmp";
constexpr const char* kAsideSuffix = ".old";

fs::path aside_directory(const fs::path& dir) {
  return with_suffix(dir, kAsideSuffix);
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  FERRY_CHECK(!ec, "io", "cannot rename {} to {}: {}", from.string(), to.string(), ec.message());
}

}  // namespace

fs::path staged_directory(const fs::path& dir) {
  return with_suffix(dir, kStagedSuffix);
}

fs::path directory_replaced_by(const fs::path& path) {
  const fs::path ext = path.extension();
  if (ext != kStagedSuffix && ext != kAsideSuffix) return {};
  fs::path dir = path;
  return dir.replace_extension();
}

fs::path replace_directory(const fs::path& dir) {
  const fs::path staged = staged_directory(dir);
  std::error_code ec;
  fs::path old;
  if (!fs::exists(dir, ec)) {
    rename_or_fail(staged, dir);
  } else if (exchange_paths(staged, dir)) {
    old = staged;
  } else {
    // Two renames: between them only DIR.old and DIR.tmp exist, both complete, which
    // recover_replaced_directory() resolves in favour of the new one.
    old = aside_directory(dir);
    remove_marked_directory(old);
    rename_or_fail(dir, old);
    rename_or_fail(staged, dir);
  }
  sync_directory(containing_directory(dir));
  return old;
}

std::string recover_replaced_directory(const fs::path& dir) {
  const fs::path staged = staged_directory(dir), aside = aside_directory(dir);
  std::error_code ec;
  std::string done;
  auto note = [&](const std::string& what) { done += (done.empty() ? "" : "; ") + what; };
  if (!is_marked_complete(dir)) {
    for (const fs::path& candidate : {staged, aside}) {
      if (!fs::is_directory(candidate, ec) || !is_marked_complete(candidate)) continue;
      if (fs::exists(dir, ec)) remove_marked_directory(dir);
      rename_or_fail(candidate, dir);
      note(fmt::format("put the complete {} in place of {}, whose save a stop interrupted",
                       candidate.filename().string(), dir.filename().string()));
      break;
    }
  }
  for (const fs::path& leftover : {staged, aside}) {
    if (!fs::is_directory(leftover, ec)) continue;
    remove_marked_directory(leftover);
    note(fmt::format("removed {}, left by an interrupted save", leftover.filename().string()));
  }
  if (!done.empty()) sync_directory(containing_directory(dir));
  return done;
}

StagedDirectory::StagedDirectory(fs::path dir) : dir_(std::move(dir)), staged_(staged_directory(dir_)) {
  remove_marked_directory(staged_);
  std::error_code ec;
  fs::create_directories(staged_, ec);
  FERRY_CHECK(!ec, "io", "cannot create {}: {}; check that the directory is writable", staged_.string(),
              ec.message());
}

StagedDirectory::~StagedDirectory() {
  if (replaced_) return;
  // The marker first, as remove_marked_directory does (which may throw, and a destructor must
  // not): a kill during the removal must not leave a partial directory that recovery would take
  // for a complete one.
  std::error_code ec;
  fs::remove(staged_ / kCompleteMarker, ec);
  fs::remove_all(staged_, ec);
}

void StagedDirectory::replace() {
  const fs::path old = replace_directory(dir_);
  replaced_ = true;
  remove_marked_directory(old);
}

void remove_marked_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  unmark_complete(dir);
  fs::remove_all(dir, ec);
  FERRY_CHECK(!ec, "io", "cannot remove {}: {}; check its permissions", dir.string(), ec.message());
}

}  // namespace ferry
