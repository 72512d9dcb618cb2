// The environment's on/off switches (core/env_switch.h): the words that turn one off, those that
// leave it on, and any other value leaving it on with a line on stderr that names it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/env_switch.h"

namespace ferry {
namespace {

TEST(EnvSwitch, TheWordsForOffInAnyCase) {
  for (const char* off : {"0", "off", "OFF", "false", "False", "no", "NO"})
    EXPECT_EQ(parse_env_switch(off), std::optional<bool>(false)) << off;
}

TEST(EnvSwitch, TheWordsForOnAndEmpty) {
  for (const char* on : {"", "1", "on", "On", "true", "TRUE", "yes"})
    EXPECT_EQ(parse_env_switch(on), std::optional<bool>(true)) << on;
}

TEST(EnvSwitch, AnythingElseIsNeither) {
  for (const char* other : {"2", "00", " 0", "0 ", "of", "disable", "n"})
    EXPECT_EQ(parse_env_switch(other), std::nullopt) << other;
}

TEST(EnvSwitch, TheEnvironmentsSettingUnsetSetAndMistaken) {
  const char* name = "FERRY_TEST_ENV_SWITCH";
  unsetenv(name);
  EXPECT_TRUE(env_switch_on(name));
  setenv(name, "0", 1);
  EXPECT_FALSE(env_switch_on(name));
  setenv(name, "off", 1);
  EXPECT_FALSE(env_switch_on(name));
  setenv(name, "1", 1);
  EXPECT_TRUE(env_switch_on(name));
  setenv(name, "disable", 1);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(env_switch_on(name));
  EXPECT_TRUE(env_switch_on(name));
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("FERRY_TEST_ENV_SWITCH=disable is not one of"), std::string::npos) << said;
  EXPECT_EQ(said.find("is not one of"), said.rfind("is not one of")) << "said once: " << said;
  unsetenv(name);
}

}  // namespace
}  // namespace ferry
