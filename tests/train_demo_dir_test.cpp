// `ferry demo --out DIR` writes base-model/, finetuned/ and train.jsonl over what DIR holds: a
// directory with anything else in it is refused, untouched; so are counts no demo can use.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "tiny_run.h"
#include "train/demo.h"

namespace ferry {
namespace {

TEST(DemoDirTest, ADirectoryWithOtherFilesIsRefusedUntouched) {
  test::ScratchDir dir("demo-dir");
  std::filesystem::create_directories(dir / "finetuned");
  std::ofstream(dir / "finetuned" / "keep.txt") << "a user's";
  std::ofstream(dir / "notes.md") << "mine";
  std::ofstream(dir / "train.jsonl") << "not the demo's\n";
  DemoOptions options;
  options.out_dir = dir.path();
  const std::string message = test::error_of([&] { run_demo(options); });
  EXPECT_TRUE(test::contains(message, "notes.md") && test::contains(message, "new or empty directory"))
      << message;
  EXPECT_EQ(test::read_file(dir / "finetuned" / "keep.txt"), "a user's");
  EXPECT_EQ(test::read_file(dir / "train.jsonl"), "not the demo's\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "base-model"));
}

TEST(DemoDirTest, AFileIsRefused) {
  test::ScratchDir dir("demo-file");
  std::ofstream(dir / "out") << "x";
  DemoOptions options;
  options.out_dir = dir / "out";
  EXPECT_TRUE(test::contains(test::error_of([&] { run_demo(options); }), "is a file"));
}

TEST(DemoDirTest, StepsAndThreadsOutOfRangeAreRefusedBeforeAnythingIsWritten) {
  test::ScratchDir dir("demo-steps");
  DemoOptions options;
  options.out_dir = dir / "out";
  options.steps = 0;
  EXPECT_TRUE(test::contains(test::error_of([&] { run_demo(options); }), "--steps 0 is invalid"));
  options.steps = 10;
  options.threads = -1;
  EXPECT_TRUE(test::contains(test::error_of([&] { run_demo(options); }), "--threads -1 is invalid"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

}  // namespace
}  // namespace ferry
