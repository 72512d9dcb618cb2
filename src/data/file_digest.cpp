#include "data/file_digest.h"

#include <sys/stat.h>

#include <mutex>
#include <nlohmann/json.hpp>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "data/sha256.h"
#include "io/atomic_file.h"

namespace ferry {

namespace {

// Files smaller than this are hashed in well under a second: they are not worth a progress line.
constexpr int64_t kAnnounceBytes = int64_t{256} << 20;

struct FileIdentity {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t inode = 0;
};

FileIdentity identity_of(const std::filesystem::path& path) {
  struct stat st {};
  FERRY_CHECK(::stat(path.c_str(), &st) == 0, "data", "cannot read {}: it does not exist or is not readable",
              path.string());
  return {static_cast<int64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec),
          static_cast<int64_t>(st.st_ino)};
}

nlohmann::json read_memo(const std::filesystem::path& memo) {
  std::error_code ec;
  if (!std::filesystem::exists(memo, ec)) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(read_text_file(memo, "data"));
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  log_warn("[data] {} is damaged; data files are hashed again and it is rewritten", memo.string());
  return nlohmann::json::object();
}

// Whether the memo entry holds a digest for exactly this identity. A damaged entry (a field
// missing or not an integer, e.g. hand-edited to "5165") remembers nothing: the file is hashed
// again and the entry rewritten, as for a damaged memo.
bool remembers(const nlohmann::json& entry, const FileIdentity& id) {
  const auto field_is = [&](const char* key, int64_t value) {
    return json_has(entry, key, &nlohmann::json::is_number_integer) && entry[key] == value;
  };
  return field_is("size", id.size) && field_is("mtime_ns", id.mtime_ns) && field_is("inode", id.inode) &&
         json_has(entry, "sha256", &nlohmann::json::is_string);
}

}  // namespace

std::string remembered_file_sha256(const std::filesystem::path& path, const std::filesystem::path& memo,
                                   bool* reused) {
  // Threads of one process share the memo file; another process may write it too (then the last
  // write wins, and a lost entry only costs a rehash).
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  std::error_code ec;
  const std::string key = std::filesystem::absolute(path, ec).lexically_normal().string();
  const FileIdentity id = identity_of(path);
  nlohmann::json entries = read_memo(memo);
  const auto it = entries.find(key);
  if (it != entries.end() && remembers(*it, id)) {
    if (reused) *reused = true;
    return (*it)["sha256"].get<std::string>();
  }
  if (id.size >= kAnnounceBytes)
    log_info("data: hashing {} ({}) to key its cache; later runs skip this while it is unchanged",
             path.string(), format_bytes(static_cast<size_t>(id.size)));
  const std::string digest = sha256_file(path);
  if (reused) *reused = false;
  // A file changed while it was hashed is not remembered.
  const FileIdentity after = identity_of(path);
  if (after.size != id.size || after.mtime_ns != id.mtime_ns) return digest;
  entries[key] = {{"size", id.size}, {"mtime_ns", id.mtime_ns}, {"inode", id.inode}, {"sha256", digest}};
  try {
    std::filesystem::create_directories(memo.parent_path());
    write_file_atomic(memo, entries.dump(1) + "\n");
  } catch (const std::exception& e) {
    log_warn("[data] cannot remember data file digests in {} ({}); they are computed at every start",
             memo.string(), e.what());
  }
  return digest;
}

}  // namespace ferry
