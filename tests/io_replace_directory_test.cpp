// Replacing a directory of many files whole, and what the next run makes of what a kill left at
// each moment of a replacement: the complete directory is kept under its name, the rest removed.
#include <gtest/gtest.h>

#include <string>

#include "io/atomic_file.h"
#include "io/completion_marker.h"
#include "io/replace_directory.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// A directory holding `content` in its one file, marked complete when `complete`.
void write_dir(const fs::path& dir, const std::string& content, bool complete) {
  fs::create_directories(dir);
  write_file_atomic(dir / "weights", content);
  if (complete) mark_complete(dir);
}

std::string content_of(const fs::path& dir) {
  return test::read_file(dir / "weights");
}

class ReplaceDirectoryTest : public ::testing::Test {
 protected:
  test::ScratchDir scratch_{"replace-dir"};
  const fs::path dir_ = scratch_ / "checkpoint-4";
  const fs::path staged_ = scratch_ / "checkpoint-4.tmp";
  const fs::path aside_ = scratch_ / "checkpoint-4.old";
};

TEST_F(ReplaceDirectoryTest, TheStagedDirectoryTakesTheNamesPlace) {
  EXPECT_EQ(staged_directory(dir_), staged_);
  write_dir(staged_, "first", true);
  EXPECT_TRUE(replace_directory(dir_).empty());  // nothing was replaced
  EXPECT_EQ(content_of(dir_), "first");

  write_dir(staged_, "second", true);
  const fs::path old = replace_directory(dir_);
  ASSERT_FALSE(old.empty());
  EXPECT_EQ(content_of(dir_), "second");
  EXPECT_EQ(content_of(old), "first");  // under a name no reader takes for the directory
  EXPECT_NE(old, dir_);
  remove_marked_directory(old);
  EXPECT_FALSE(fs::exists(old));
  EXPECT_FALSE(fs::exists(staged_));
}

TEST_F(ReplaceDirectoryTest, AStagedDirectoryIsRemovedUnlessItReplaced) {
  write_dir(dir_, "old", true);
  write_dir(staged_, "what an earlier attempt left", false);
  {
    StagedDirectory staged(dir_);
    EXPECT_EQ(staged.path(), staged_);
    EXPECT_TRUE(fs::is_empty(staged_));  // the earlier attempt's files are gone
    write_dir(staged.path(), "new but failed", false);
  }  // a failed save: the staged files go, the old directory stays
  EXPECT_FALSE(fs::exists(staged_));
  EXPECT_EQ(content_of(dir_), "old");
  {
    StagedDirectory staged(dir_);
    write_dir(staged.path(), "new", true);
    staged.replace();
  }
  EXPECT_EQ(content_of(dir_), "new");
  EXPECT_TRUE(is_marked_complete(dir_));
  for (const auto& entry : fs::directory_iterator(scratch_.path()))
    EXPECT_EQ(entry.path(), dir_) << "left beside it: " << entry.path();
}

TEST_F(ReplaceDirectoryTest, NothingToRecover) {
  EXPECT_EQ(recover_replaced_directory(dir_), "");
  write_dir(dir_, "kept", true);
  EXPECT_EQ(recover_replaced_directory(dir_), "");
  EXPECT_EQ(content_of(dir_), "kept");
}

TEST_F(ReplaceDirectoryTest, AKillWhileTheNewOneIsWrittenKeepsTheOld) {
  write_dir(dir_, "old", true);
  write_dir(staged_, "half", false);
  EXPECT_NE(recover_replaced_directory(dir_), "");
  EXPECT_EQ(content_of(dir_), "old");
  EXPECT_FALSE(fs::exists(staged_));
}

TEST_F(ReplaceDirectoryTest, AKillAfterTheExchangeRemovesTheOld) {
  write_dir(dir_, "new", true);
  write_dir(staged_, "old, exchanged out", true);
  EXPECT_NE(recover_replaced_directory(dir_), "");
  EXPECT_EQ(content_of(dir_), "new");
  EXPECT_FALSE(fs::exists(staged_));
}

TEST_F(ReplaceDirectoryTest, AKillBetweenTheTwoRenamesKeepsTheNew) {
  write_dir(aside_, "old", true);
  write_dir(staged_, "new", true);
  const std::string done = recover_replaced_directory(dir_);
  EXPECT_NE(done.find("checkpoint-4.tmp"), std::string::npos) << done;
  EXPECT_EQ(content_of(dir_), "new");
  EXPECT_TRUE(is_marked_complete(dir_));
  EXPECT_FALSE(fs::exists(staged_));
  EXPECT_FALSE(fs::exists(aside_));
}

TEST_F(ReplaceDirectoryTest, AKillAfterTheOldWasRenamedAsideRestoresIt) {
  // The new one was not complete yet (or is gone): the old one comes back, over what is under
  // the name without a marker.
  write_dir(aside_, "old", true);
  write_dir(staged_, "half", false);
  write_dir(dir_, "half", false);
  recover_replaced_directory(dir_);
  EXPECT_EQ(content_of(dir_), "old");
  EXPECT_TRUE(is_marked_complete(dir_));
  EXPECT_FALSE(fs::exists(staged_));
  EXPECT_FALSE(fs::exists(aside_));
}

TEST_F(ReplaceDirectoryTest, AKillAfterTheNewOneWasInRemovesTheAside) {
  write_dir(dir_, "new", true);
  write_dir(aside_, "old", true);
  recover_replaced_directory(dir_);
  EXPECT_EQ(content_of(dir_), "new");
  EXPECT_FALSE(fs::exists(aside_));
}

TEST_F(ReplaceDirectoryTest, AFileUnderAStagedNameIsLeftAlone) {
  write_dir(dir_, "kept", true);
  write_file_atomic(staged_, "a user's file");
  recover_replaced_directory(dir_);
  EXPECT_EQ(test::read_file(staged_), "a user's file");
}

// The names a replacement writes and sets aside lead back to the directory it replaces; others do not.
TEST(ReplacedDirectoryName, TheStagedAndTheAsideNameTheirDirectory) {
  EXPECT_EQ(directory_replaced_by(staged_directory("out/checkpoint-40")),
            std::filesystem::path("out/checkpoint-40"));
  EXPECT_EQ(directory_replaced_by("best.old"), std::filesystem::path("best"));
  EXPECT_EQ(directory_replaced_by("best"), std::filesystem::path());
  EXPECT_EQ(directory_replaced_by("notes.txt"), std::filesystem::path());
}

}  // namespace
}  // namespace ferry
