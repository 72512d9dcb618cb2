// JSON from users: bounded nesting before parsing, and excerpts that never print a whole value.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_text.h"
#include "test_util.h"

namespace ferry {
namespace {

using nlohmann::json;
using test::throws_with;

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonNesting, LimitIsInclusiveAndTheMessageSaysWhere) {
  EXPECT_EQ(json_nesting_problem(nested_arrays(kMaxJsonNesting)), "");
  const std::string problem = json_nesting_problem("{\"a\":\n " + nested_arrays(kMaxJsonNesting) + "}");
  EXPECT_NE(problem.find("deeper than 512 levels"), std::string::npos) << problem;
  // The 513th opening bracket is the 512th '[' of line 2, which starts with a space.
  EXPECT_NE(problem.find("line 2, column 513"), std::string::npos) << problem;
}

TEST(JsonNesting, BracketsInsideStringsDoNotCount) {
  const std::string in_string = "[\"" + std::string(10000, '[') + "\\\"[\"]";
  EXPECT_EQ(json_nesting_problem(in_string), "");
  EXPECT_EQ(json_nesting_problem(in_string, 1), "");
  EXPECT_NE(json_nesting_problem("[[\"]\"]]", 1), "");  // the ']' in the string closes nothing
}

TEST(JsonParse, TooDeepIsAnErrorNotACrash) {
  std::string error;
  EXPECT_FALSE(try_parse_json(nested_arrays(100000), &error));
  EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
  EXPECT_FALSE(try_parse_ordered_json(std::string(100000, '{'), &error));
  EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
  EXPECT_TRUE(throws_with([] { parse_json(nested_arrays(600), "test", "deep.json", "fix it"); },
                          {"[test] deep.json: ", "nested deeper than 512", "; fix it"}));
}

TEST(JsonParse, BadTextAndHugeNumbersAreErrorsWithPositions) {
  std::string error;
  EXPECT_FALSE(try_parse_json("{\"a\": 1,\n \"b\": }", &error));
  EXPECT_EQ(error.rfind("not valid JSON (parse error at line 2, column", 0), 0u) << error;
  // nlohmann reports a number out of double range as out_of_range, not parse_error.
  EXPECT_FALSE(try_parse_json("[1e400]", &error));
  EXPECT_NE(error.find("number overflow"), std::string::npos) << error;
  EXPECT_FALSE(try_parse_json("\"\xff\"", &error));
  const auto ok = try_parse_json(" {\"a\": [1, 2]} ", &error);
  ASSERT_TRUE(ok);
  EXPECT_EQ((*ok)["a"][1], 2);
}

TEST(JsonExcerpt, ShortValuesAreShownWhole) {
  EXPECT_EQ(json_excerpt(json::parse(R"({"a": [1, true, null], "b": "x"})")),
            R"({"a": [1, true, null], "b": "x"})");
  EXPECT_EQ(json_excerpt(json(3.5)), "3.5");
  EXPECT_EQ(json_excerpt(nlohmann::ordered_json::parse(R"({"z": 1, "a": 2})")), R"({"z": 1, "a": 2})");
}

TEST(JsonExcerpt, LargeAndDeepValuesAreCutShort) {
  json big = json::array();
  for (int i = 0; i < 1000000; ++i) big.push_back(i);
  const std::string shown = json_excerpt(big, 40);
  EXPECT_LE(shown.size(), 40u);
  EXPECT_EQ(shown.rfind("[0, 1, 2", 0), 0u) << shown;
  EXPECT_EQ(shown.substr(shown.size() - 3), "...");

  // Built in code, so deeper than any parse allows; an excerpt must not recurse through it.
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  EXPECT_EQ(json_excerpt(deep), "[[[[...]]]]");

  const std::string long_text(100000, 'x');
  EXPECT_LE(json_excerpt(json(long_text)).size(), 60u);
}

// An excerpt of a string is its opening quote, a prefix and "..."; closed again, it must parse.
bool is_valid_string_excerpt(const std::string& excerpt) {
  std::string error;
  return excerpt.size() >= 4 &&
         try_parse_json(excerpt.substr(0, excerpt.size() - 3) + "\"", &error).has_value();
}

TEST(JsonExcerpt, CutsAtCharacterBoundariesAndReplacesBadUtf8) {
  std::string accents;
  for (int i = 0; i < 50; ++i) accents += "\xC3\xA9";  // "é": a cut must never split its two bytes
  for (size_t max_chars : {20, 21, 22}) {
    const std::string cut = json_excerpt(json(accents), max_chars);
    EXPECT_LE(cut.size(), max_chars);
    EXPECT_TRUE(is_valid_string_excerpt(cut)) << cut;
  }
  const std::string replaced = json_excerpt(json(std::string(100, '\xFF')), 30);
  EXPECT_TRUE(is_valid_string_excerpt(replaced)) << replaced;
}

TEST(JsonKeyList, FirstKeysOnly) {
  EXPECT_EQ(json_key_list(json::parse(R"({"b": 1, "a": 2})")), "'a', 'b'");
  EXPECT_EQ(json_key_list(json::object()), "none");
  EXPECT_EQ(json_key_list(json::array()), "not an object");
  json many = json::object();
  for (int i = 0; i < 100; ++i) many["k" + std::to_string(i + 100)] = i;
  const std::string keys = json_key_list(many);
  EXPECT_NE(keys.find("and 88 more"), std::string::npos) << keys;
}

}  // namespace
}  // namespace ferry
