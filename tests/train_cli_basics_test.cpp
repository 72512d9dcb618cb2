// The small things people try first: `ferry --version`, `ferry init --list` without --arch, and
// FERRY_LOG_LEVEL.
#include <gtest/gtest.h>

#include "core/log.h"
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

TEST(CliBasics, LogLevelNamesParseAndAnUnknownOneIsSaidAndIgnored) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::Debug);
  EXPECT_EQ(parse_log_level("info"), LogLevel::Info);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::Warn);
  EXPECT_EQ(parse_log_level("error"), LogLevel::Error);
  EXPECT_EQ(parse_log_level("off"), LogLevel::Off);
  EXPECT_FALSE(parse_log_level("DEBUG").has_value());
  EXPECT_FALSE(parse_log_level("").has_value());
  std::string out;
  ASSERT_EQ(test::run_command("FERRY_LOG_LEVEL=loud " + test::ferry_binary().string() + " --version", &out),
            0)
      << out;
  EXPECT_NE(out.find("FERRY_LOG_LEVEL=loud is not one of debug, info, warn, error, off"), std::string::npos)
      << out;
  EXPECT_NE(out.find("ferry "), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
