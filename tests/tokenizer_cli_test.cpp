// `ferry tokenize` end to end with the Mistral (llama2 fixture) tokenizer: encode with and without
// special tokens, decode with and without them, and a malformed --decode.
#include "tokenizer_fixtures.h"

namespace ferry {
namespace {

std::string run_tokenize(const std::string& args, int* status) {
  const auto dir = test::tokenizer_fixture_dir("llama2");
  std::string out;
  *status = test::run_command(
      test::ferry_binary().string() + " tokenize --tokenizer " + dir.string() + " " + args, &out);
  return out;
}

TEST(TokenizeCommand, EncodesAndDecodes) {
  ASSERT_NE(test::fixture_tokenizer("llama2"), nullptr);
  ASSERT_TRUE(std::filesystem::exists(test::ferry_binary())) << "build the ferry target first";
  int status = -1;
  EXPECT_EQ(run_tokenize("--text 'Hello world'", &status), "[1, 22557, 1526]\n");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(run_tokenize("--text 'Hello world' --no-special", &status), "[22557, 1526]\n");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(run_tokenize("--decode '[1, 22557, 1526]'", &status), "<s> Hello world\n");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(run_tokenize("--decode '[1,22557,1526]' --skip-special", &status), "Hello world\n");
  EXPECT_EQ(status, 0);
}

TEST(TokenizeCommand, RejectsBadInput) {
  ASSERT_TRUE(std::filesystem::exists(test::ferry_binary())) << "build the ferry target first";
  int status = -1;
  const std::string out = run_tokenize("--decode '[1, \"x\"]'", &status);
  EXPECT_EQ(status, 2);
  EXPECT_NE(out.find("is not a token id"), std::string::npos) << out;
  EXPECT_NE(run_tokenize("", &status).find("--text"), std::string::npos);
  EXPECT_EQ(status, 2);
}

}  // namespace
}  // namespace ferry
