// ferry's tokenizer against Hugging Face tokenizers: the goldens of tools/tokenizer_goldens.mjs
// (hard strings with the Llama 3, Qwen3 and Mistral tokenizers) must match 100%, for encoding with
// and without special tokens, for decoding with and without skip_special_tokens, one text at a time
// and in parallel batches.
#include <algorithm>
#include <sstream>
#include <thread>

#include "tokenizer/bpe_model.h"
#include "tokenizer_fixtures.h"

namespace ferry {
namespace {

using nlohmann::json;
using test::fixture_tokenizer;
using test::golden_input;

std::string show_ids(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << '[';
  for (size_t k = 0; k < ids.size(); ++k) s << (k ? "," : "") << ids[k];
  s << ']';
  return s.str();
}

::testing::AssertionResult same_ids(const std::vector<int32_t>& actual,
                                    const std::vector<int32_t>& expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  size_t k = 0;
  while (k < actual.size() && k < expected.size() && actual[k] == expected[k]) ++k;
  const size_t from = k >= 3 ? k - 3 : 0;
  auto window = [&](const std::vector<int32_t>& v) {
    return show_ids(
        std::vector<int32_t>(v.begin() + std::min(from, v.size()), v.begin() + std::min(k + 6, v.size())));
  };
  return ::testing::AssertionFailure()
         << "first difference at index " << k << " of " << expected.size() << " (got " << actual.size()
         << " ids): ferry ..." << window(actual) << " vs HF ..." << window(expected);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tokenizer_ = fixture_tokenizer(GetParam());
    ASSERT_NE(tokenizer_, nullptr);
    golden_ = test::read_json_file(test::fixtures_dir() / "tokenizer_goldens" / (GetParam() + ".json"));
    ASSERT_TRUE(golden_.is_object());
    ASSERT_GT(golden_["cases"].size(), 40u);
  }
  const Tokenizer* tokenizer_ = nullptr;
  json golden_;
};

TEST_P(GoldenTest, EncodeWithSpecialTokens) {
  for (const auto& c : golden_["cases"]) {
    EXPECT_TRUE(same_ids(tokenizer_->encode(golden_input(c), true), c["ids"].get<std::vector<int32_t>>()))
        << "case '" << c["name"].get<std::string>() << "'";
  }
}

TEST_P(GoldenTest, EncodeWithoutSpecialTokens) {
  for (const auto& c : golden_["cases"]) {
    EXPECT_TRUE(
        same_ids(tokenizer_->encode(golden_input(c), false), c["ids_no_special"].get<std::vector<int32_t>>()))
        << "case '" << c["name"].get<std::string>() << "'";
  }
}

TEST_P(GoldenTest, DecodeEncodedIds) {
  for (const auto& c : golden_["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(ids, false), c["decoded"].get<std::string>())
        << "case '" << c["name"].get<std::string>() << "'";
    EXPECT_EQ(tokenizer_->decode(ids, true), c["decoded_skip_special"].get<std::string>())
        << "case '" << c["name"].get<std::string>() << "', skip_special_tokens";
  }
}

TEST_P(GoldenTest, DecodeRandomIds) {
  ASSERT_GE(golden_["decode_cases"].size(), 20u);
  for (const auto& c : golden_["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->decode(ids, false), c["text"].get<std::string>()) << "ids " << show_ids(ids);
    EXPECT_EQ(tokenizer_->decode(ids, true), c["text_skip_special"].get<std::string>())
        << "ids " << show_ids(ids) << ", skip_special_tokens";
  }
}

// encode_batch on the global pool, and plain encode from several threads at once (the per-thread
// word caches and regex state must not interfere), both equal to the goldens.
TEST_P(GoldenTest, ParallelEncodeMatches) {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  for (int round = 0; round < 3; ++round) {
    for (const auto& c : golden_["cases"]) {
      texts.push_back(golden_input(c));
      expected.push_back(c["ids"].get<std::vector<int32_t>>());
    }
  }
  const auto batch = tokenizer_->encode_batch(texts, true);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t k = 0; k < texts.size(); ++k)
    EXPECT_TRUE(same_ids(batch[k], expected[k])) << "batch item " << k;

  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = t; k < texts.size(); k += 2)
        if (tokenizer_->encode(texts[k], true) != expected[k]) ++failures[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST_P(GoldenTest, VocabularyAndLookups) {
  EXPECT_EQ(tokenizer_->vocab_size(), golden_["vocab_size"].get<int64_t>());
  for (const auto& [token, id] : golden_["token_to_id"].items()) {
    const auto got = tokenizer_->token_to_id(token);
    if (id.is_null()) {
      EXPECT_FALSE(got.has_value()) << token;
    } else {
      ASSERT_TRUE(got.has_value()) << token;
      EXPECT_EQ(*got, id.get<int32_t>()) << token;
      EXPECT_EQ(tokenizer_->id_to_token(*got).value_or("?"), token);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::Values("llama3", "qwen3", "llama2"),
                         [](const auto& info) { return info.param; });

// The fast paths of the BPE model (per-thread cache; long words cut at "▁") against the plain
// algorithm on the whole word, with the Mistral vocabulary on SentencePiece-normalized goldens.
TEST(BpeFastPaths, EqualThePlainAlgorithm) {
  ASSERT_NE(fixture_tokenizer("llama2"), nullptr);
  const json root = test::read_json_file(test::tokenizer_fixture_dir("llama2") / "tokenizer.json");
  const tok::BpeModel model(root["model"]);
  ASSERT_TRUE(model.splits_long_words());
  const json golden = test::read_json_file(test::fixtures_dir() / "tokenizer_goldens" / "llama2.json");
  int checked = 0;
  for (int round = 0; round < 2; ++round) {  // the second round hits the cache
    for (const auto& c : golden["cases"]) {
      if (c.contains("bytes_hex")) continue;
      std::string word = "\xE2\x96\x81";  // what the normalizer makes of the text: ▁ prefix, spaces → ▁
      for (const char ch : c["text"].get<std::string>())
        word += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
      std::vector<int32_t> fast, plain;
      model.tokenize(word, fast);
      model.tokenize_uncached(word, plain);
      EXPECT_TRUE(same_ids(fast, plain)) << "case '" << c["name"].get<std::string>() << "'";
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);
}

// bos/eos/pad from tokenizer_config.json, and what each post-processor adds.
TEST(TokenizerSpecialTokens, FromConfigAndPostProcessor) {
  const Tokenizer* llama3 = fixture_tokenizer("llama3");
  const Tokenizer* qwen3 = fixture_tokenizer("qwen3");
  const Tokenizer* llama2 = fixture_tokenizer("llama2");
  ASSERT_TRUE(llama3 && qwen3 && llama2);

  EXPECT_EQ(llama3->bos_token_id(), 128000);
  EXPECT_EQ(llama3->eos_token_id(), 128001);
  EXPECT_EQ(llama3->pad_token_id(), std::nullopt);
  EXPECT_FALSE(llama3->adds_bos());  // this early Llama 3 tokenizer.json's post-processor is ByteLevel
  EXPECT_FALSE(llama3->adds_eos());

  EXPECT_EQ(qwen3->bos_token_id(), std::nullopt);
  EXPECT_EQ(qwen3->eos_token_id(), 151645);  // <|im_end|>
  EXPECT_EQ(qwen3->pad_token_id(), 151643);  // <|endoftext|>
  EXPECT_FALSE(qwen3->adds_bos());
  EXPECT_FALSE(qwen3->adds_eos());

  EXPECT_EQ(llama2->bos_token_id(), 1);
  EXPECT_EQ(llama2->eos_token_id(), 2);
  EXPECT_EQ(llama2->pad_token_id(), std::nullopt);
  EXPECT_TRUE(llama2->adds_bos());
  EXPECT_FALSE(llama2->adds_eos());
  EXPECT_EQ(llama2->special_prefix(), std::vector<int32_t>{1});
  EXPECT_TRUE(llama2->special_suffix().empty());
}

}  // namespace
}  // namespace ferry
