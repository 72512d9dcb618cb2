// Data file digests are remembered by size, mtime and inode: an unchanged file is not read again,
// a changed one is.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/file_digest.h"
#include "data/sha256.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(FileDigest, RememberedWhileTheFileIsUnchanged) {
  test::ScratchDir dir("file-digest");
  const auto data = dir / "train.jsonl";
  const auto memo = dir / "cache" / "file-digests.json";
  std::ofstream(data) << "{\"text\": \"one\"}\n";
  bool reused = true;
  const std::string first = remembered_file_sha256(data, memo, &reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(first, sha256_file(data));
  EXPECT_TRUE(std::filesystem::exists(memo));
  EXPECT_EQ(remembered_file_sha256(data, memo, &reused), first);
  EXPECT_TRUE(reused);

  // The memo answers from size and mtime alone: a forged entry is believed (which is what makes the
  // fast path fast), until the file changes.
  std::string text = test::read_file(memo);
  text.replace(text.find(first), first.size(), std::string(64, 'a'));
  std::ofstream(memo) << text;
  EXPECT_EQ(remembered_file_sha256(data, memo, &reused), std::string(64, 'a'));
  std::ofstream(data, std::ios::app) << "{\"text\": \"two\"}\n";
  const std::string changed = remembered_file_sha256(data, memo, &reused);
  EXPECT_FALSE(reused);
  EXPECT_EQ(changed, sha256_file(data));

  // A damaged memo is rebuilt.
  std::ofstream(memo) << "not json";
  EXPECT_EQ(remembered_file_sha256(data, memo, &reused), changed);
  EXPECT_FALSE(reused);
  EXPECT_EQ(remembered_file_sha256(data, memo, &reused), changed);
  EXPECT_TRUE(reused);
}

// An entry whose fields are not integers (a hand-edited or damaged memo) is not believed: the file
// is hashed again and the entry written anew.
TEST(FileDigest, DamagedEntryIsHashedAgain) {
  test::ScratchDir dir("file-digest-entry");
  const auto data = dir / "train.jsonl";
  const auto memo = dir / "file-digests.json";
  std::ofstream(data) << "{\"text\": \"one\"}\n";
  const std::string digest = remembered_file_sha256(data, memo);
  for (const char* field : {"size", "mtime_ns", "inode"}) {
    nlohmann::json entries = nlohmann::json::parse(test::read_file(memo));
    nlohmann::json& entry = entries.begin().value();
    entry[field] = std::to_string(entry[field].get<int64_t>());
    std::ofstream(memo) << entries.dump();
    bool reused = true;
    EXPECT_EQ(remembered_file_sha256(data, memo, &reused), digest) << field;
    EXPECT_FALSE(reused) << field;
    EXPECT_EQ(remembered_file_sha256(data, memo, &reused), digest) << field;
    EXPECT_TRUE(reused) << field;
  }
}

}  // namespace
}  // namespace ferry
