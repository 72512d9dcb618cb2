// read_text_file: a file's bytes, or an error that names the path and says what to do; a directory
// is refused by name (a stream opens one and reads it as empty text, which the caller would then
// misreport as an empty or invalid file).
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "core/text_file.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(ReadTextFile, ReadsTheBytes) {
  test::ScratchDir dir("text-file");
  std::ofstream(dir / "a.yaml", std::ios::binary) << "model: x\n";
  EXPECT_EQ(read_text_file(dir / "a.yaml", "config"), "model: x\n");
}

TEST(ReadTextFile, ADirectoryIsRefusedByName) {
  test::ScratchDir dir("text-file-dir");
  EXPECT_TRUE(test::throws_with(
      [&] { read_text_file(dir.path(), "config", "give the path of a YAML file"); },
      {"[config] " + dir.path().string() + " is a directory, not a file; give the path of a YAML file"}));
  EXPECT_TRUE(test::throws_with([&] { read_text_file(dir / "missing.json", "profile"); },
                                {"[profile] cannot open", "missing.json", "check the path"}));
}

}  // namespace
}  // namespace ferry
