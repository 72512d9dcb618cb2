// Text data end to end: a tiny Llama with a tiny byte-level tokenizer and a chat template trains two
// steps on chat, alpaca and plain-text files; the tokenized data is cached, found again without
// tokenizing, and rebuilt when the data or the options change.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "data_test_tokenizer.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/model_init.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/training_data.h"

namespace ferry {
namespace {

class TrainingDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = scratch_ / "model";
    write_random_model(preset_config("llama", "tiny"), 3, model_);
    test::write_tiny_chat_tokenizer(model_);
    chat_ = scratch_ / "chat.jsonl";
    std::ofstream(chat_)
        << R"({"messages": [{"role": "user", "content": "Is the cat in?"}, {"role": "assistant", "content": "The cat is in."}]}
{"messages": [{"role": "system", "content": "Answer well."}, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hello there!"}, {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "Then we eat."}]}
)";
    alpaca_ = scratch_ / "alpaca.json";
    std::ofstream(alpaca_) << R"([{"instruction": "Name an animal", "input": "", "output": "A cat."},
 {"instruction": "Repeat", "input": "hello", "output": "hello"}])";
    text_ = scratch_ / "notes.txt";
    std::ofstream(text_) << "The cat sat on the mat, and the other cat sat as well.\n";
  }

  TrainConfig config(std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {
        "model=" + model_.string(),
        "data=" + chat_.string() + "," + alpaca_.string() + "," + text_.string(),
        "output_dir=" + (scratch_ / "out").string(),
        "seq_len=64",
        "global_batch=2",
        "micro_batch=1",
        "max_steps=2",
        "learning_rate=1e-3",
        "threads=2",
        "save_dtype=float32"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config("", overrides, "test");
  }

  test::ScratchDir scratch_{"training-data"};
  std::filesystem::path model_, chat_, alpaca_, text_;
};

TEST_F(TrainingDataTest, TrainsTwoStepsOnTextFormats) {
  std::vector<double> losses;
  TrainHooks hooks;
  hooks.on_step = [&](const StepRecord& r) {
    losses.push_back(r.loss);
    EXPECT_GT(r.counted_tokens, 0);
  };
  const TrainSummary summary = run_training(config(), hooks);
  EXPECT_TRUE(summary.finished);
  ASSERT_EQ(losses.size(), 2u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  // A random model over 320 tokens starts near ln(320).
  EXPECT_NEAR(losses[0], std::log(320.0), 1.0);
  EXPECT_TRUE(std::filesystem::exists(scratch_ / "out" / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(scratch_ / "out" / ".cache"));
}

TEST_F(TrainingDataTest, CacheIsReusedAndKeyedByEverythingThatShapesTokens) {
  const TrainConfig c = config();
  const ModelConfig model = load_model_config(model_);
  TrainingDataSummary first;
  const auto docs = load_training_documents(c, model, &first);
  ASSERT_TRUE(first.tokenized);
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(first.documents, 5);
  EXPECT_EQ(first.cache, scratch_ / "out" / ".cache" / first.fingerprint);
  const auto index_time = std::filesystem::last_write_time(first.cache / "index.json");
  const auto shard_time = std::filesystem::last_write_time(first.cache / "shard-00000.bin");
  const nlohmann::json index = nlohmann::json::parse(test::read_file(first.cache / "index.json"));
  EXPECT_EQ(index["info"]["records_by_format"]["messages"], 2);
  EXPECT_EQ(index["info"]["records_by_format"]["alpaca"], 2);
  EXPECT_EQ(index["info"]["stop_strings"], nlohmann::json::array({"<|im_end|>"}));

  TrainingDataSummary second;
  const auto again = load_training_documents(c, model, &second);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(second.fingerprint, first.fingerprint);
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.trained_tokens, first.trained_tokens);
  ASSERT_EQ(again.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(again[i].input_ids, docs[i].input_ids);
    EXPECT_EQ(again[i].labels, docs[i].labels);
  }
  EXPECT_EQ(std::filesystem::last_write_time(first.cache / "index.json"), index_time);
  EXPECT_EQ(std::filesystem::last_write_time(first.cache / "shard-00000.bin"), shard_time);

  // Options and inputs that change the tokens change the fingerprint.
  auto fingerprint = [&](const TrainConfig& changed) {
    TrainingDataSummary s;
    load_training_documents(changed, model, &s);
    EXPECT_FALSE(s.from_cache);
    return s.fingerprint;
  };
  const std::string with_prompt = fingerprint(config({"train_on_prompt=true"}));
  EXPECT_NE(with_prompt, first.fingerprint);
  std::ofstream(scratch_ / "other.jinja")
      << test::read_file(test::fixtures_dir() / "chat_templates" / "generation-tags.jinja");
  EXPECT_NE(fingerprint(config({"chat_template=" + (scratch_ / "other.jinja").string()})), first.fingerprint);
  std::ofstream(text_, std::ios::app) << "More text.\n";
  const std::string edited = fingerprint(config());
  EXPECT_NE(edited, first.fingerprint);
  EXPECT_NE(edited, with_prompt);
  // cache_dir moves the cache.
  TrainingDataSummary moved;
  load_training_documents(config({"cache_dir=" + (scratch_ / "elsewhere").string()}), model, &moved);
  EXPECT_EQ(moved.cache, scratch_ / "elsewhere" / edited);
}

TEST_F(TrainingDataTest, PrepareAheadThenTrainReadsTheCache) {
  const TrainConfig c = config();
  const TrainingDataSummary built = prepare_training_data(c);
  EXPECT_FALSE(built.from_cache);
  EXPECT_TRUE(std::filesystem::exists(built.cache / "index.json"));
  EXPECT_EQ(prepare_training_data(c).from_cache, true);
  const auto before = std::filesystem::last_write_time(built.cache / "index.json");
  EXPECT_TRUE(run_training(c).finished);
  EXPECT_EQ(std::filesystem::last_write_time(built.cache / "index.json"), before);
}

TEST_F(TrainingDataTest, MasksFollowTheTemplateAndStopStrings) {
  const ModelConfig model = load_model_config(model_);
  const auto docs = load_training_documents(config({"data=" + chat_.string()}), model);
  ASSERT_EQ(docs.size(), 2u);
  const Tokenizer tokenizer = Tokenizer::load(model_);
  std::vector<std::string> trained;
  for (const auto& doc : docs) {
    std::vector<int32_t> run;
    for (size_t i = 0; i <= doc.labels.size(); ++i) {
      if (i < doc.labels.size() && doc.labels[i] != kIgnoreIndex) {
        run.push_back(doc.labels[i]);
      } else if (!run.empty()) {
        trained.push_back(tokenizer.decode(run));
        run.clear();
      }
    }
  }
  EXPECT_EQ(trained, (std::vector<std::string>{"The cat is in.<|im_end|>", "Hello there!<|im_end|>",
                                               "Then we eat.<|im_end|>"}));
}

TEST_F(TrainingDataTest, ChatTemplateKwargsReachTheTemplate) {
  std::ofstream(scratch_ / "vars.jinja") << "{% if preamble is defined %}{{ preamble }}\n{% endif %}{% for m "
                                            "in messages %}<|im_start|>{{ m.role }}\n"
                                            "{{ m.content }}<|im_end|>\n{% endfor %}{% if "
                                            "add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  const ModelConfig model = load_model_config(model_);
  const Tokenizer tokenizer = Tokenizer::load(model_);
  auto first_text = [&](const std::vector<std::string>& extra, TrainingDataSummary* s) {
    std::vector<std::string> overrides = {"data=" + chat_.string(),
                                          "chat_template=" + (scratch_ / "vars.jinja").string()};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return tokenizer.decode(load_training_documents(config(overrides), model, s)[0].input_ids);
  };
  TrainingDataSummary plain, with_vars;
  EXPECT_EQ(first_text({}, &plain).find("Be brief."), std::string::npos);
  EXPECT_NE(first_text({"chat_template_kwargs={preamble: Be brief.}"}, &with_vars)
                .find("Be brief.\n<|im_start|>user"),
            std::string::npos);
  EXPECT_NE(plain.fingerprint, with_vars.fingerprint);
}

// Pre-tokenized files are parsed once and cached like text; unmasked token streams count as plain
// text (split packing), anything with a prompt mask as examples (best fit).
TEST_F(TrainingDataTest, PreTokenizedDataIsCachedLikeText) {
  const ModelConfig model = load_model_config(model_);
  test::write_token_data(scratch_ / "tokens.jsonl", 12, model.vocab_size, 5);
  const TrainConfig c = config({"data=" + (scratch_ / "tokens.jsonl").string()});
  TrainingDataSummary first, second;
  const auto docs = load_training_documents(c, model, &first);
  EXPECT_FALSE(first.tokenized);
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(std::filesystem::exists(first.cache / "index.json"));
  const auto again = load_training_documents(c, model, &second);
  EXPECT_TRUE(second.from_cache);
  ASSERT_EQ(again.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(again[i].labels, docs[i].labels);
  EXPECT_FALSE(second.plain_text);  // write_token_data masks every odd document's prompt
  EXPECT_EQ(packing_mode(c, second), PackingMode::BestFit);

  std::ofstream(scratch_ / "stream.jsonl") << "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4, 5]}\n";
  TrainingDataSummary stream;
  load_training_documents(config({"data=" + (scratch_ / "stream.jsonl").string()}), model, &stream);
  EXPECT_TRUE(stream.plain_text);
}

TEST_F(TrainingDataTest, ExamplesArePackedBestFitAndPlainTextSplit) {
  const ModelConfig model = load_model_config(model_);
  TrainingDataSummary chat, text, chat_cached;
  load_training_documents(config({"data=" + chat_.string() + "," + alpaca_.string()}), model, &chat);
  EXPECT_FALSE(chat.plain_text);
  EXPECT_EQ(packing_mode(config(), chat), PackingMode::BestFit);
  load_training_documents(config({"data=" + chat_.string() + "," + alpaca_.string()}), model, &chat_cached);
  EXPECT_TRUE(chat_cached.from_cache);
  EXPECT_FALSE(chat_cached.plain_text);  // from the cache's index too
  load_training_documents(config({"data=" + text_.string()}), model, &text);
  EXPECT_TRUE(text.plain_text);
  EXPECT_EQ(packing_mode(config(), text), PackingMode::Split);
  EXPECT_EQ(packing_mode(config({"packing_strategy=best_fit"}), text), PackingMode::BestFit);
  EXPECT_EQ(packing_mode(config({"packing_strategy=wrapped"}), chat), PackingMode::Split);
  EXPECT_EQ(packing_mode(config({"packing=false"}), chat), PackingMode::None);
}

TEST_F(TrainingDataTest, ConfigErrors) {
  EXPECT_THROW(config({"data_format=chatml"}), Error);
  EXPECT_EQ(config({"train_on_input=true"}).train_on_prompt, true);
  const ModelConfig model = load_model_config(model_);
  // No tokenizer in the tokenizer directory.
  std::filesystem::create_directories(scratch_ / "empty");
  try {
    load_training_documents(config({"tokenizer=" + (scratch_ / "empty").string()}), model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer.json"), std::string::npos) << e.what();
  }
  try {
    load_training_documents(config({"data=" + (scratch_ / "missing.jsonl").string()}), model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ferry
