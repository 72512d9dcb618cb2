// The SHA-256 of a data file, remembered: hashing 20 GB at ~185 MB/s costs ~110 s, at every start.
// A small memo (JSON, beside the tokenized caches) keeps each file's digest with its size,
// modification time (ns) and inode; while those are unchanged the digest is taken from the memo
// without reading the file (the fast path make, rsync and git rely on too). Any change of the three
// rehashes. A memo that is missing, damaged or not writable only costs the hashing.
#pragma once

#include <filesystem>
#include <string>

namespace ferry {

// Hex SHA-256 of `path`'s bytes; `memo` is the memo file (created when missing). `reused` (when
// given) is set to whether the memo answered.
std::string remembered_file_sha256(const std::filesystem::path& path, const std::filesystem::path& memo,
                                   bool* reused = nullptr);

}  // namespace ferry
