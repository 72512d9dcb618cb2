// `ferry tokenize --data CONFIG --show N`: the first examples as trained, the trained spans marked,
// and how the data packs.
#include <gtest/gtest.h>

#include <fstream>

#include "data_test_tokenizer.h"
#include "test_util.h"
#include "train/model_init.h"

namespace ferry {
namespace {

TEST(TokenizeShow, PrintsExamplesWithTrainedSpansAndPacking) {
  test::ScratchDir dir("tokenize-show");
  write_random_model(preset_config("llama", "tiny"), 3, dir / "model");
  test::write_tiny_chat_tokenizer(dir / "model");
  std::ofstream(dir / "chat.jsonl")
      << R"({"messages": [{"role": "user", "content": "Is the cat in?"}, {"role": "assistant", "content": "It is."}]}
{"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."}]}
)";
  std::ofstream(dir / "train.yaml") << "model: model\ndata: chat.jsonl\noutput_dir: out\nseq_len: 128\n";
  std::string out;
  ASSERT_EQ(test::run_command(test::ferry_binary().string() + " tokenize --data " +
                                  (dir / "train.yaml").string() + " --show 1",
                              &out),
            0)
      << out;
  EXPECT_NE(out.find("--- example 1 of 2:"), std::string::npos) << out;
  EXPECT_NE(out.find("user\nIs the cat in?"), std::string::npos) << out;
  EXPECT_NE(out.find("\u27e6It is.<|im_end|>\u27e7"), std::string::npos) << out;
  EXPECT_EQ(out.find("--- example 2"), std::string::npos) << out;
  EXPECT_NE(out.find("--- packing best_fit: 2 documents -> 2 rows of 128 tokens; 0 split, 0 truncated"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\"documents\": 2"), std::string::npos) << out;

  EXPECT_NE(test::run_command(test::ferry_binary().string() + " tokenize --show 2 --text hi", &out), 0);
  EXPECT_NE(out.find("give --data"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry
