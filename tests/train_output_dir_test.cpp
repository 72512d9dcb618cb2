// The output directory serves the tokenizer and chat template the run trained with, where the
// config overrode the model's (`tokenizer:`, `chat_template:`).
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "train/output_dir.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

class OutputDirTest : public ::testing::Test {
 protected:
  test::ScratchDir root_{"output-dir"};
  fs::path out_ = root_ / "out", tok_ = root_ / "tok";
  void SetUp() override {
    fs::create_directories(out_);
    fs::create_directories(tok_);
    // As write_hf_model_dir leaves it: the model's own tokenizer files and template.
    write(out_ / "tokenizer.json", "{\"model\": \"the model's\"}");
    write(out_ / "tokenizer_config.json", "{\"eos_token\": \"</s>\", \"chat_template\": \"model {{ x }}\"}");
    write(out_ / "chat_template.jinja", "model template {{ x }}");
    write(out_ / "generation_config.json", "{}");
  }
};

TEST_F(OutputDirTest, NoOverrideLeavesTheModelsFiles) {
  write_tokenizer_overrides(out_, {}, {});
  EXPECT_EQ(test::read_file(out_ / "tokenizer.json"), "{\"model\": \"the model's\"}");
  EXPECT_EQ(test::read_file(out_ / "chat_template.jinja"), "model template {{ x }}");
}

TEST_F(OutputDirTest, ATokenizerOverrideReplacesTheTokenizerFilesAndTheTemplateFile) {
  write(tok_ / "tokenizer.json", "{\"model\": \"the override\"}");
  write(tok_ / "tokenizer_config.json", "{\"eos_token\": \"<|end|>\", \"chat_template\": \"tok {{ y }}\"}");
  write_tokenizer_overrides(out_, tok_ / "tokenizer.json", {});  // the file, not the directory
  EXPECT_EQ(test::read_file(out_ / "tokenizer.json"), "{\"model\": \"the override\"}");
  EXPECT_EQ(test::read_file(out_ / "tokenizer_config.json"),
            "{\"eos_token\": \"<|end|>\", \"chat_template\": \"tok {{ y }}\"}");
  // The override directory has no chat_template.jinja: the model's would shadow the template
  // training used (tokenizer_config.json's), so it goes.
  EXPECT_FALSE(fs::exists(out_ / "chat_template.jinja"));
  EXPECT_EQ(test::read_file(out_ / "generation_config.json"), "{}");
}

TEST_F(OutputDirTest, AChatTemplateOverrideIsWrittenAsFileAndConfigKey) {
  write(tok_ / "chat.jinja", "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  write_tokenizer_overrides(out_, {}, tok_ / "chat.jinja");
  EXPECT_EQ(test::read_file(out_ / "chat_template.jinja"),
            "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  const auto config = nlohmann::json::parse(test::read_file(out_ / "tokenizer_config.json"));
  EXPECT_EQ(config["chat_template"], "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  EXPECT_EQ(config["eos_token"], "</s>");  // the rest of the config kept
}

}  // namespace
}  // namespace ferry
