// Data file digests are remembered by size, mtime and inode: an unchanged file is not read again,
// a changed one is.
#include <gtest/gtest.h>

#include <fstream>

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

}  // namespace
}  // namespace ferry
