// `ferry generate` and `ferry chat` end to end on a tiny random model with the tiny chat tokenizer
// (Qwen2.5's template): the reply on stdout and the speed on stderr, JSONL in and out, a multi-turn
// chat that reuses its cache, and the errors a user meets.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data_test_tokenizer.h"
#include "test_util.h"

namespace ferry {
namespace {

class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir("generate-cli");
    std::string out;
    ASSERT_EQ(test::run_command(ferry() + " init --arch qwen2 --preset tiny --out " + model(), &out), 0)
        << out;
    test::write_tiny_chat_tokenizer(model());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string ferry() { return test::ferry_binary().string(); }
  static std::string model() { return (*dir_ / "model").string(); }
  static std::filesystem::path path(const std::string& name) { return *dir_ / name; }

  // Runs `ferry ARGS` with stdout and stderr apart; returns the exit status.
  static int run(const std::string& args, std::string* out, std::string* err, const std::string& input = "") {
    const auto out_path = path("stdout.txt"), err_path = path("stderr.txt");
    std::string command = ferry() + " " + args + " >" + out_path.string() + " 2>" + err_path.string();
    if (!input.empty()) {
      std::ofstream(path("stdin.txt")) << input;
      command += " <" + path("stdin.txt").string();
    }
    command = "(" + command + ")";  // run_command's own 2>&1 then leaves these redirections alone
    std::string ignored;
    const int status = test::run_command(command, &ignored);
    *out = test::read_file(out_path);
    *err = test::read_file(err_path);
    return status;
  }

  static test::ScratchDir* dir_;
};

test::ScratchDir* GenerateCommand::dir_ = nullptr;

TEST_F(GenerateCommand, PromptRepliesOnStdoutAndReportsSpeedOnStderr) {
  std::string out, err, out2, err2;
  const std::string args =
      "generate --device cpu --model " + model() + " --prompt 'hello there' --max-new-tokens 6";
  ASSERT_EQ(run(args, &out, &err), 0) << err;
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(err.find("prefill:"), std::string::npos) << err;
  EXPECT_NE(err.find("tok/s"), std::string::npos) << err;
  EXPECT_NE(err.find("sampling: greedy"), std::string::npos) << err;
  EXPECT_EQ(out.find("prefill"), std::string::npos) << "stdout holds the text only: " << out;
  // Greedy is deterministic; so is sampling with a seed.
  ASSERT_EQ(run(args, &out2, &err2), 0) << err2;
  EXPECT_EQ(out, out2);
  const std::string sampled = args + " --temperature 1.2 --top-k 40 --top-p 0.95 --seed 7";
  ASSERT_EQ(run(sampled, &out, &err), 0) << err;
  EXPECT_NE(err.find("temperature 1.2, top_k 40, top_p 0.95, seed 7"), std::string::npos) << err;
  ASSERT_EQ(run(sampled, &out2, &err2), 0) << err2;
  EXPECT_EQ(out, out2);
  // Plain text without the template.
  ASSERT_EQ(run(args + " --raw", &out, &err), 0) << err;
}

TEST_F(GenerateCommand, MessagesFileGivesOneJsonLinePerConversation) {
  {
    std::ofstream f(path("conversations.jsonl"));
    f << R"([{"role": "user", "content": "hi"}])"
      << "\n\n";
    f << R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "and you?"}]})"
      << "\n";
  }
  std::string out, err;
  ASSERT_EQ(run("generate --device cpu --model " + model() + " --messages " +
                    path("conversations.jsonl").string() + " --max-new-tokens 4",
                &out, &err),
            0)
      << err;
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(lines, line)) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2u) << out;
  EXPECT_EQ(records[0]["messages"].size(), 2u);
  EXPECT_EQ(records[1]["messages"].size(), 3u);
  for (const auto& r : records) {
    EXPECT_EQ(r["messages"].back()["role"], "assistant");
    EXPECT_TRUE(r["messages"].back()["content"].is_string());
    EXPECT_LE(r["completion_tokens"].get<int>(), 4);
    EXPECT_GT(r["prompt_tokens"].get<int>(), 5);
    EXPECT_TRUE(r["finish_reason"] == "length" || r["finish_reason"] == "stop");
  }
}

TEST_F(GenerateCommand, ChatKeepsTheConversationAndReusesItsCache) {
  std::string out, err;
  ASSERT_EQ(run("chat --device cpu --model " + model() + " --max-new-tokens 3", &out, &err,
                "hello\nhow are you\n/reset\nanew\n/exit\nnever read\n"),
            0)
      << err;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  // The second turn re-renders the conversation and feeds only what the cache lacks.
  EXPECT_NE(err.find("reused from the cache"), std::string::npos) << err;
  // End of input ends the chat too.
  ASSERT_EQ(run("chat --device cpu --model " + model() + " --max-new-tokens 2", &out, &err, "one turn\n"), 0)
      << err;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST_F(GenerateCommand, ErrorsSayWhatToDo) {
  std::string out, err;
  EXPECT_EQ(run("generate --model " + path("nothing").string() + " --prompt hi", &out, &err), 2);
  EXPECT_NE(err.find("has no config.json"), std::string::npos) << err;

  EXPECT_EQ(run("generate --device cpu --model " + model(), &out, &err), 2);
  EXPECT_NE(err.find("give --prompt TEXT or --messages"), std::string::npos) << err;

  std::string long_prompt;
  for (int i = 0; i < 2100; ++i) long_prompt += "z ";
  EXPECT_EQ(
      run("generate --device cpu --model " + model() + " --raw --prompt '" + long_prompt + "'", &out, &err),
      2);
  EXPECT_NE(err.find("more than the 2048 the model takes (max_position_embeddings)"), std::string::npos)
      << err;

  EXPECT_EQ(run("generate --device cpu --model " + model() + " --context 4096 --prompt hi", &out, &err), 2);
  EXPECT_NE(err.find("--context 4096 is beyond what the model takes"), std::string::npos) << err;

  EXPECT_EQ(run("generate --device cpu --model " + model() + " --context -5 --prompt hi", &out, &err), 2);
  EXPECT_NE(err.find("--context -5 is invalid"), std::string::npos) << err;
  EXPECT_EQ(run("generate --device cpu --model " + model() + " --max-new-tokens -1 --prompt hi", &out, &err),
            2);
  EXPECT_NE(err.find("--max-new-tokens -1 is invalid"), std::string::npos) << err;
  EXPECT_EQ(run("chat --device cpu --model " + model() + " --threads -2", &out, &err, "hi\n"), 2);
  EXPECT_NE(err.find("--threads -2 is invalid"), std::string::npos) << err;

  EXPECT_EQ(
      run("generate --device cpu --model " + model() + " --prompt hi --temperature 1 --top-p 0", &out, &err),
      2);
  EXPECT_NE(err.find("top_p 0 is invalid"), std::string::npos) << err;
  EXPECT_EQ(run("generate --device cpu --model " + model() + " --prompt hi --temperature -1", &out, &err), 2);
  EXPECT_NE(err.find("temperature -1 is invalid"), std::string::npos) << err;

  // A model without a chat template: chat and --messages refuse, --prompt falls back to plain text.
  const auto bare = path("bare");
  ASSERT_EQ(test::run_command(ferry() + " init --arch llama --preset tiny --out " + bare.string(), &out), 0)
      << out;
  EXPECT_EQ(run("chat --device cpu --model " + bare.string(), &out, &err, "hi\n"), 2);
  EXPECT_NE(err.find("has no tokenizer.json"), std::string::npos) << err;
  test::write_tiny_tokenizer(bare, "<|end_of_text|>");
  EXPECT_EQ(run("chat --device cpu --model " + bare.string(), &out, &err, "hi\n"), 2);
  EXPECT_NE(err.find("has no chat template"), std::string::npos) << err;
  EXPECT_NE(err.find("--chat-template"), std::string::npos) << err;
  ASSERT_EQ(
      run("generate --device cpu --model " + bare.string() + " --prompt hi --max-new-tokens 2", &out, &err),
      0)
      << err;
  EXPECT_NE(err.find("no chat template: the prompt is given as plain text"), std::string::npos) << err;
}

}  // namespace
}  // namespace ferry
