// The small things people try first: `ferry --version`, and `ferry init --list` without --arch.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ferry {
namespace {

TEST(CliBasics, VersionPrintsTheProjectVersion) {
  std::string out;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + " --version", &out), 0) << out;
  EXPECT_EQ(out.rfind("ferry ", 0), 0u) << out;
  EXPECT_NE(out.find('.'), std::string::npos) << out;
}

TEST(CliBasics, InitListAloneShowsEveryArchitecturesPresets) {
  std::string out;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + " init --list", &out), 0) << out;
  for (const char* preset : {"llama/tiny", "llama/llama-3.1-8b", "mistral/", "qwen2/", "qwen3/qwen3-8b"})
    EXPECT_NE(out.find(preset), std::string::npos) << preset << " missing from\n" << out;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + " init --list --arch qwen3", &out), 0) << out;
  EXPECT_EQ(out.find("llama/"), std::string::npos) << out;
  EXPECT_NE(
      test::run_command(test::ferry_binary().string() + " init --preset tiny --out /nonexistent/x", &out), 0);
  EXPECT_NE(out.find("give --arch"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
