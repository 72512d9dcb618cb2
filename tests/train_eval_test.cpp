// `ferry eval` reads data as training does: text formats through the tokenizer, chat template and
// token cache of training_data.h. Its loss on chat data equals its loss on the same documents
// written out pre-tokenized (input_ids and labels), which the HF goldens check elsewhere.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "data_test_tokenizer.h"
#include "model/model_config.h"
#include "test_util.h"
#include "train/evaluate.h"
#include "train/model_init.h"
#include "train/train_config.h"
#include "train/training_data.h"

namespace ferry {
namespace {

class EvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = scratch_ / "model";
    write_random_model(preset_config("llama", "tiny"), 5, model_);
    test::write_tiny_chat_tokenizer(model_);
    chat_ = scratch_ / "chat.jsonl";
    std::ofstream(chat_)
        << R"({"messages": [{"role": "user", "content": "Is the cat in?"}, {"role": "assistant", "content": "The cat is in."}]}
{"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hello there, and then we eat."}]}
)";
  }
  EvalOptions options(std::vector<std::filesystem::path> data) const {
    EvalOptions o;
    o.model = model_;
    o.data = std::move(data);
    o.seq_len = 128;  // holds each example whole: best-fit packing truncates, never splits
    o.cache_dir = scratch_ / "cache";
    o.threads = 2;
    return o;
  }
  // The documents training would read from `chat_`, written as pre-tokenized JSONL.
  std::filesystem::path as_tokens(bool train_on_prompt) {
    TrainConfig c;
    c.model = model_;
    c.data = {chat_};
    c.cache_dir = scratch_ / "cache";
    c.train_on_prompt = train_on_prompt;
    const auto docs = load_training_documents(c, load_model_config(model_));
    const auto path = scratch_ / (train_on_prompt ? "all.jsonl" : "assistant.jsonl");
    std::ofstream out(path);
    for (const auto& d : docs)
      out << nlohmann::json{{"input_ids", d.input_ids}, {"labels", d.labels}}.dump() << "\n";
    return path;
  }

  test::ScratchDir scratch_{"eval"};
  std::filesystem::path model_, chat_;
};

TEST_F(EvalTest, ChatDataScoresAsItsPreTokenizedDocuments) {
  const EvalResult text = run_eval(options({chat_}));
  const EvalResult tokens = run_eval(options({as_tokens(false)}));
  EXPECT_GT(text.counted_tokens, 0);
  EXPECT_EQ(text.counted_tokens, tokens.counted_tokens);
  EXPECT_EQ(text.loss, tokens.loss);
  EXPECT_EQ(text.rows, tokens.rows);
  // Only the assistant's tokens count, as in training; --train-on-prompt counts the prompts too.
  EvalOptions all = options({chat_});
  all.train_on_prompt = true;
  const EvalResult every = run_eval(all);
  EXPECT_GT(every.counted_tokens, text.counted_tokens);
  // Unmasked token data packs split by default, as in training; chat data packs best-fit.
  EvalOptions all_tokens = options({as_tokens(true)});
  EXPECT_EQ(run_eval(all_tokens).packing, PackingMode::Split);
  all_tokens.packing_strategy = "best_fit";
  EXPECT_EQ(every.loss, run_eval(all_tokens).loss);
  EXPECT_TRUE(std::filesystem::exists(scratch_ / "cache"));  // the tokenized text was cached there
}

// `ferry eval` packs as training packs the same data: chat examples best-fit, never split, plain text
// split across rows; packing_strategy overrides it as in training, and the result says which.
TEST_F(EvalTest, PacksAsTrainingDoes) {
  const EvalOptions chat = options({chat_});  // the two examples together are longer than seq_len
  const EvalResult best_fit = run_eval(chat);
  EXPECT_EQ(best_fit.packing, PackingMode::BestFit);
  TrainConfig train;
  train.model = model_;
  train.data = {chat_};
  train.cache_dir = scratch_ / "cache";
  TrainingDataSummary summary;
  const auto docs = load_training_documents(train, load_model_config(model_), &summary);
  EXPECT_EQ(packing_mode(train, summary), PackingMode::BestFit);
  EXPECT_EQ(best_fit.rows,
            static_cast<int64_t>(pack_documents(docs, chat.seq_len, PackingMode::BestFit).size()));

  EvalOptions split = chat;
  split.packing_strategy = "split";
  const EvalResult wrapped = run_eval(split);
  EXPECT_EQ(wrapped.packing, PackingMode::Split);
  EXPECT_EQ(wrapped.rows,
            static_cast<int64_t>(pack_documents(docs, chat.seq_len, PackingMode::Split).size()));

  const auto text = scratch_ / "text.jsonl";
  std::ofstream(text) << R"({"text": "The cat is in. Hello there."})"
                      << "\n";
  EXPECT_EQ(run_eval(options({text})).packing, PackingMode::Split);

  EvalOptions bad = chat;
  bad.packing_strategy = "tight";
  try {
    run_eval(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packing_strategy"), std::string::npos) << e.what();
  }
}

// On a device, `ferry eval` runs the sliding engine of a planned run, forward only: the reference's
// loss (the sums of micro-chunks are grouped differently, so to float rounding), the same targets.
TEST_F(EvalTest, OnADeviceItRunsThePlannedEngine) {
  EvalOptions cpu = options({as_tokens(true)});
  cpu.device = "cpu";
  EvalOptions sim = cpu;
  sim.device = "sim";
  sim.gpu_memory = "64MiB";
  const EvalResult reference = run_eval(cpu);
  const EvalResult engine = run_eval(sim);
  EXPECT_EQ(engine.counted_tokens, reference.counted_tokens);
  EXPECT_EQ(engine.rows, reference.rows);
  EXPECT_NEAR(engine.loss, reference.loss, 1e-6 * reference.loss);
  EvalOptions unknown = cpu;
  unknown.device = "tpu";
  try {
    run_eval(unknown);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'device' must be one of auto, cpu, sim, cuda; got 'tpu'"),
              std::string::npos)
        << e.what();
  }
}

// The command line's counts are refused by their flags: a negative --max-rows or --dump-rows was
// taken for "all rows" or "none".
TEST_F(EvalTest, NegativeCountsAreRefusedByTheirFlags) {
  const auto with = [&](auto set) {
    EvalOptions o = options({chat_});
    o.device = "cpu";
    set(o);
    return o;
  };
  EXPECT_TRUE(test::throws_with([&] { run_eval(with([](EvalOptions& o) { o.micro_batch = 0; })); },
                                {"--micro-batch must be at least 1", "got 0"}));
  EXPECT_TRUE(test::throws_with([&] { run_eval(with([](EvalOptions& o) { o.micro_batch = -3; })); },
                                {"--micro-batch", "got -3"}));
  EXPECT_TRUE(test::throws_with([&] { run_eval(with([](EvalOptions& o) { o.max_rows = -1; })); },
                                {"--max-rows", "got -1"}));
  EXPECT_TRUE(test::throws_with([&] { run_eval(with([](EvalOptions& o) { o.dump_rows = -1; })); },
                                {"--dump-rows", "got -1"}));
  EXPECT_TRUE(test::throws_with([&] { run_eval(with([](EvalOptions& o) { o.seq_len = int64_t{1} << 40; })); },
                                {"--seq-len must be between 2 and 2147483647"}));
}

// A micro-batch larger than the data is the data's size: the same loss, without buffers of
// micro_batch x seq_len tokens (10^12 sequences died of std::bad_alloc), on the reference and on a
// device.
TEST_F(EvalTest, AMicroBatchLargerThanTheDataIsTheWholeData) {
  EvalOptions cpu = options({as_tokens(true)});
  cpu.device = "cpu";
  const EvalResult one = run_eval(cpu);
  cpu.micro_batch = 1000000000000;
  const EvalResult huge = run_eval(cpu);
  EXPECT_EQ(huge.rows, one.rows);
  EXPECT_EQ(huge.counted_tokens, one.counted_tokens);
  EXPECT_NEAR(huge.loss, one.loss, 1e-6 * one.loss);
  EvalOptions sim = cpu;
  sim.device = "sim";
  sim.gpu_memory = "64MiB";
  sim.micro_batch = std::numeric_limits<int64_t>::max();  // rows + micro_batch - 1 overflowed
  const EvalResult engine = run_eval(sim);
  EXPECT_EQ(engine.counted_tokens, one.counted_tokens);
  EXPECT_NEAR(engine.loss, one.loss, 1e-6 * one.loss);
}

}  // namespace
}  // namespace ferry
