#include "data/token_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "token cache";
constexpr char kMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t documents;
  uint64_t tokens;
};
static_assert(sizeof(ShardHeader) == kHeaderBytes);

size_t shard_bytes(uint64_t documents, uint64_t tokens) {
  return kHeaderBytes + 8 * (documents + 1) + 8 * tokens;
}

std::string shard_name(size_t index) {
  return fmt::format("shard-{:05d}.bin", index);
}

// Writes documents [begin, end) as one shard; returns its entry for index.json.
nlohmann::json write_shard(const std::filesystem::path& path, const std::vector<Document>& docs, size_t begin,
                           size_t end) {
  std::vector<int64_t> offsets = {0};
  for (size_t d = begin; d < end; ++d)
    offsets.push_back(offsets.back() + static_cast<int64_t>(docs[d].input_ids.size()));
  ShardHeader header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.documents = end - begin;
  header.tokens = static_cast<uint64_t>(offsets.back());
  AtomicFile file(path);
  file.write(&header, sizeof(header));
  file.write(offsets.data(), offsets.size() * sizeof(int64_t));
  for (size_t d = begin; d < end; ++d)
    file.write(docs[d].input_ids.data(), docs[d].input_ids.size() * sizeof(int32_t));
  for (size_t d = begin; d < end; ++d)
    file.write(docs[d].labels.data(), docs[d].labels.size() * sizeof(int32_t));
  FERRY_ASSERT(file.size() == shard_bytes(header.documents, header.tokens), "shard size");
  const size_t bytes = file.size();
  file.commit();
  return {{"file", path.filename().string()},
          {"documents", header.documents},
          {"tokens", header.tokens},
          {"bytes", bytes}};
}

[[noreturn]] void damaged(const std::filesystem::path& dir, const std::string& what) {
  fail(kWhere, "{} is damaged: {}; delete that directory and it is rebuilt on the next run", dir.string(),
       what);
}

// index.json's count under `key`: a non-negative integer, or the cache is damaged (a float or a
// negative number would convert to a huge size_t).
uint64_t index_count(const std::filesystem::path& dir, const nlohmann::json& object, const char* key) {
  if (!json_has(object, key, &nlohmann::json::is_number_unsigned))
    damaged(dir, fmt::format(
                     "index.json's '{}' is {}, not a count", key,
                     object.is_object() && object.contains(key) ? json_excerpt(object.at(key)) : "missing"));
  return object.at(key).get<uint64_t>();
}

// Offsets start at 0, never decrease and end at the shard's tokens: then every document lies
// inside the token arrays, and nothing is read beyond the file.
bool offsets_valid(const std::vector<int64_t>& offsets, uint64_t tokens) {
  if (offsets.front() != 0 || offsets.back() != static_cast<int64_t>(tokens)) return false;
  for (size_t d = 0; d + 1 < offsets.size(); ++d)
    if (offsets[d + 1] < offsets[d]) return false;
  return true;
}

struct Shard {
  std::string name;
  MappedFile map;
  ShardHeader header;
};

// The shard of `entry` in index.json, mapped, its header's counts checked against the file's size
// and against the entry.
Shard open_shard(const std::filesystem::path& dir, const nlohmann::json& entry) {
  const auto path = dir / entry.at("file").get<std::string>();
  Shard shard{path.filename().string(), {}, {}};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) damaged(dir, fmt::format("{} is missing", shard.name));
  shard.map = MappedFile::open(path);
  const MappedFile& map = shard.map;
  ShardHeader& header = shard.header;
  if (map.size() < kHeaderBytes) damaged(dir, fmt::format("{} is truncated", shard.name));
  std::memcpy(&header, map.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 || header.version != kVersion)
    damaged(dir, fmt::format("{} is not a ferry token shard", shard.name));
  // Counts no larger than the file first, so that shard_bytes cannot overflow.
  if (header.documents > map.size() || header.tokens > map.size() ||
      map.size() != shard_bytes(header.documents, header.tokens) ||
      header.documents != index_count(dir, entry, "documents") ||
      header.tokens != index_count(dir, entry, "tokens"))
    damaged(dir, fmt::format("{} has the wrong size for its header", shard.name));
  return shard;
}

// Appends the documents of `shard` to `docs`, once its offsets are known to stay inside it.
void append_documents(const std::filesystem::path& dir, const Shard& shard, std::vector<Document>& docs) {
  const ShardHeader& header = shard.header;
  std::vector<int64_t> offsets(header.documents + 1);
  std::memcpy(offsets.data(), shard.map.data() + kHeaderBytes, offsets.size() * sizeof(int64_t));
  if (!offsets_valid(offsets, header.tokens))
    damaged(dir, fmt::format("{} has bad document offsets", shard.name));
  const uint8_t* ids = shard.map.data() + kHeaderBytes + offsets.size() * sizeof(int64_t);
  const uint8_t* labels = ids + header.tokens * sizeof(int32_t);
  shard.map.will_read(0, shard.map.size());
  for (uint64_t d = 0; d < header.documents; ++d) {
    const int64_t b = offsets[d], e = offsets[d + 1];
    Document doc;
    doc.input_ids.resize(static_cast<size_t>(e - b));
    doc.labels.resize(static_cast<size_t>(e - b));
    std::memcpy(doc.input_ids.data(), ids + b * 4, static_cast<size_t>(e - b) * 4);
    std::memcpy(doc.labels.data(), labels + b * 4, static_cast<size_t>(e - b) * 4);
    docs.push_back(std::move(doc));
  }
}

}  // namespace

void write_token_cache(const std::filesystem::path& dir, const std::string& fingerprint,
                       const std::vector<Document>& docs, const nlohmann::json& info, int64_t shard_tokens) {
  FERRY_CHECK(shard_tokens > 0, kWhere, "shard_tokens must be positive");
  std::error_code ec;
  if (std::filesystem::exists(dir / "index.json", ec)) return;
  const auto parent = dir.parent_path();
  std::filesystem::create_directories(parent, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create {}: {}", parent.string(), ec.message());
  static std::atomic<int> counter{0};
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::filesystem::path staging =
      parent / fmt::format(".{}.partial-{}-{}-{}", dir.filename().string(), getpid(), stamp, counter++);
  std::filesystem::create_directories(staging, ec);
  FERRY_CHECK(!ec, kWhere, "cannot create {}: {}", staging.string(), ec.message());
  try {
    nlohmann::json shards = nlohmann::json::array();
    int64_t total_tokens = 0;
    size_t begin = 0;
    while (begin < docs.size() || (docs.empty() && shards.empty())) {
      size_t end = begin;
      int64_t tokens = 0;
      while (end < docs.size() &&
             (end == begin || tokens + static_cast<int64_t>(docs[end].input_ids.size()) <= shard_tokens)) {
        FERRY_ASSERT(docs[end].labels.size() == docs[end].input_ids.size(),
                     "labels and ids differ in length");
        tokens += static_cast<int64_t>(docs[end].input_ids.size());
        ++end;
      }
      shards.push_back(write_shard(staging / shard_name(shards.size()), docs, begin, end));
      total_tokens += tokens;
      begin = end;
      if (docs.empty()) break;
    }
    const nlohmann::json index = {{"format", "ferry-token-cache"},
                                  {"version", kVersion},
                                  {"fingerprint", fingerprint},
                                  {"documents", docs.size()},
                                  {"tokens", total_tokens},
                                  {"shards", shards},
                                  {"info", info}};
    write_file_atomic(staging / "index.json", index.dump(1) + "\n");
    sync_directory(staging);
    // An empty leftover directory (no index.json) is in the way of the rename; a complete cache is not.
    if (std::filesystem::exists(dir, ec) && !std::filesystem::exists(dir / "index.json", ec))
      std::filesystem::remove_all(dir, ec);
    std::filesystem::rename(staging, dir, ec);
    if (ec) {
      FERRY_CHECK(std::filesystem::exists(dir / "index.json"), kWhere, "cannot move {} to {}: {}",
                  staging.string(), dir.string(), ec.message());
      log_info("[data] {} was built by another process meanwhile; using it", dir.string());
      std::filesystem::remove_all(staging, ec);
      return;
    }
    sync_directory(parent);
  } catch (...) {
    std::filesystem::remove_all(staging, ec);
    throw;
  }
}

std::optional<std::vector<Document>> read_token_cache(const std::filesystem::path& dir,
                                                      const std::string& fingerprint,
                                                      nlohmann::json* index_out) {
  std::error_code ec;
  const auto index_path = dir / "index.json";
  if (!std::filesystem::exists(index_path, ec)) return std::nullopt;
  std::string parse_error;
  std::optional<nlohmann::json> parsed = try_parse_json(read_text_file(index_path, kWhere), &parse_error);
  if (!parsed) damaged(dir, "index.json is " + parse_error);
  const nlohmann::json index = std::move(*parsed);
  try {
    if (index.at("format") != "ferry-token-cache" || index.at("version") != kVersion)
      damaged(dir, "index.json is not a version-1 ferry token cache");
    if (index.at("fingerprint") != fingerprint)
      damaged(dir, fmt::format("it was made for fingerprint {}, not {}",
                               json_excerpt(index.at("fingerprint")), fingerprint));
    // index.json's count is checked against the shards' headers (each checked against its file's
    // size) before anything is reserved for it: a damaged count must not become a huge allocation.
    // Each shard is mapped again to be read, so that only one is mapped at a time.
    uint64_t held = 0;
    for (const auto& entry : index.at("shards")) held += open_shard(dir, entry).header.documents;
    if (held != index_count(dir, index, "documents"))
      damaged(dir, "the shards hold another number of documents");
    std::vector<Document> docs;
    docs.reserve(held);
    for (const auto& entry : index.at("shards")) append_documents(dir, open_shard(dir, entry), docs);
    if (index_out) *index_out = std::move(index);
    return docs;
  } catch (const nlohmann::json::exception& e) {
    damaged(dir, fmt::format("index.json lacks an entry ({})", e.what()));
  }
}

}  // namespace ferry
