// The tokenized-data cache: documents written once as memory-mappable token shards, so that reruns
// and resumes never tokenize again.
//
// A cache is a directory (by convention <cache_dir>/<fingerprint>, see train/training_data.h):
//
//   index.json        {"format": "ferry-token-cache", "version": 1, "fingerprint": ..., "documents": N,
//                      "tokens": T, "shards": [{"file", "documents", "tokens", "bytes"}...], "info": {...}}
//   shard-00000.bin   little-endian: "FERRYTOK" | u32 version | u32 0 | u64 documents (n) | u64 tokens (t)
//                     | i64 offsets[n + 1] (token offset of each document, offsets[n] = t)
//                     | i32 input_ids[t] | i32 labels[t]
//
// Shards hold up to shard_tokens tokens (whole documents; a longer document gets a shard of its own).
// The cache is built in a private staging directory (every file fsynced through AtomicFile), which
// is then renamed into place: readers see a complete cache or none, and of two processes building
// the same cache at once one wins and the other's copy is dropped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/document.h"

namespace ferry {

inline constexpr int64_t kDefaultShardTokens = int64_t{1} << 26;  // 64 Mi tokens, 512 MiB per shard

// Writes `documents` as the cache `dir` (which must not exist yet; a complete cache there is kept
// and this call does nothing). `info` is stored in index.json for people (options, stats).
void write_token_cache(const std::filesystem::path& dir, const std::string& fingerprint,
                       const std::vector<Document>& documents, const nlohmann::json& info,
                       int64_t shard_tokens = kDefaultShardTokens);

// Reads the cache in `dir`: nullopt when there is none (no index.json). Throws ferry::Error when it
// exists but is damaged or was made for another fingerprint (delete the directory to rebuild it).
// `index` (when given) receives index.json.
std::optional<std::vector<Document>> read_token_cache(const std::filesystem::path& dir,
                                                      const std::string& fingerprint,
                                                      nlohmann::json* index = nullptr);

}  // namespace ferry
