// Bad tokenizer.json files, data records and chat templates, through the real loaders: each is a
// ferry::Error naming the file and the field (data: the file and line), also with skip_malformed,
// where a malformed record is skipped and counted instead.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/text_dataset.h"
#include "fault_inputs.h"
#include "jinja/template.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::faults {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ScratchDir;
using test::throws_with;

// ---- tokenizer.json ----

struct TokenizerCase {
  const char* name;
  std::string text;
  std::vector<std::string> message;  // parts the error must hold, besides the file's path
};

// The tiny tokenizer.json with the JSON pointer `at` set to `value` (null removes it).
std::string tokenizer_with(const std::string& at, const json& value) {
  json t = json::parse(tiny_tokenizer_json());
  if (value.is_null()) {
    const json::json_pointer pointer(at);
    t[pointer.parent_pointer()].erase(pointer.back());
  } else {
    t[json::json_pointer(at)] = value;
  }
  return t.dump();
}

std::vector<TokenizerCase> tokenizer_cases() {
  const std::string valid = tiny_tokenizer_json();
  return {
      {"empty", "", {"tokenizer.json: not valid JSON"}},
      {"truncated", valid.substr(0, valid.size() * 2 / 3), {"tokenizer.json: not valid JSON (parse error"}},
      {"nested 100,000 deep",
       nested_arrays(100000),
       {"tokenizer.json: arrays and objects nested deeper than 512"}},
      {"nested deep inside",
       tokenizer_with("/normalizer", json::parse(nested_arrays(1000))),
       {"nested deeper"}},
      {"not an object", "[]", {"tokenizer.json is not a JSON object"}},
      {"no model", tokenizer_with("/model", nullptr), {"has no \"model\""}},
      {"a Unigram model",
       tokenizer_with("/model/type", "Unigram"),
       {"model type 'Unigram' is not supported"}},
      {"a model type that is a number", tokenizer_with("/model/type", 7), {"\"type\"", "not a string"}},
      {"vocab a list",
       tokenizer_with("/model/vocab", json::array()),
       {"\"vocab\" of the BPE model", "not an object"}},
      {"a vocab id that is text",
       tokenizer_with("/model/vocab/a", "x"),
       {"vocab entry \"a\" has a non-integer id"}},
      {"a vocab id far past its size",
       tokenizer_with("/model/vocab/a", 2147483647),
       {"the BPE vocab has 280 entries but ids up to 2147483647"}},
      {"merges a string", tokenizer_with("/model/merges", "a b"), {"\"merges\"", "not an array"}},
      {"a merge of unknown tokens",
       tokenizer_with("/model/merges/0", "zzz qqq"),
       {"merge 0 (\"zzz\" \"qqq\") uses a token that is not in the vocab"}},
      {"dropout a string", tokenizer_with("/model/dropout", "0.1"), {"\"dropout\"", "not a number"}},
      {"an added token id negative",
       tokenizer_with("/added_tokens/0/id", -5),
       {"added token \"<|begin_of_text|>\" has id -5"}},
      {"an added token flag that is text",
       tokenizer_with("/added_tokens/0/special", "yes"),
       {"\"special\" of added token", "not true or false"}},
      {"a normalizer of unknown type",
       tokenizer_with("/normalizer", {{"type", "Precompiled"}}),
       {"normalizer type 'Precompiled' is not supported"}},
      {"a pre-tokenizer without a type",
       tokenizer_with("/pre_tokenizer", json::object()),
       {"has no \"type\""}},
  };
}

TEST(CorruptTokenizer, EachIsAnErrorNamingTheFileAndField) {
  ScratchDir dir("faults-tokenizer");
  const fs::path path = dir / "tokenizer.json";
  for (const TokenizerCase& c : tokenizer_cases()) {
    SCOPED_TRACE(c.name);
    write_bytes(path, c.text);
    std::vector<std::string> parts = {path.string()};
    parts.insert(parts.end(), c.message.begin(), c.message.end());
    try {
      Tokenizer::load(dir.path());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 800u) << e.what();
    }
  }
  write_bytes(path, tiny_tokenizer_json());
  EXPECT_EQ(Tokenizer::load(dir.path()).vocab_size(), 289);
}

// ---- data records ----

struct DataCase {
  const char* name;
  std::string file;     // name of the data file (its extension picks the reader)
  std::string content;  // a valid record first, then the bad one on line 2 (for .jsonl)
  std::vector<std::string> message;
};

std::vector<DataCase> data_cases() {
  const std::string good = R"({"text": "the cat"})";
  return {
      {"bad UTF-8", "a.jsonl", good + "\n{\"text\": \"caf\xe9\"}\n", {"a.jsonl:2: not valid JSON", "UTF-8"}},
      {"a truncated line", "a.jsonl", good + "\n{\"text\": \"the c", {"a.jsonl:2: not valid JSON"}},
      {"a text that is a number",
       "a.jsonl",
       good + "\n{\"text\": 5}\n",
       {"a.jsonl:2: 'text' is 5 (number), not a string"}},
      {"messages that are a string",
       "a.jsonl",
       R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"
       "\n{\"messages\": \"hi\"}\n",
       {"a.jsonl:2:", "'messages'"}},
      {"a token id that is text",
       "t.jsonl",
       "{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, \"a\"]}\n",
       {"t.jsonl:2: 'input_ids'[1] is \"a\", not an integer"}},
      {"a token id past int32",
       "t.jsonl",
       "{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 99999999999]}\n",
       {"t.jsonl:2: 'input_ids'[1] is 99999999999"}},
      {"a record nested 100,000 deep",
       "a.jsonl",
       good + "\n{\"text\": \"x\", \"meta\": " + nested_arrays(100000) + "}\n",
       {"a.jsonl:2: arrays and objects nested deeper than 512 levels"}},
      {"a token record nested deep",
       "t.jsonl",
       "{\"input_ids\": [1, 2]}\n" + nested_arrays(100000) + "\n",
       {"t.jsonl:2: arrays and objects nested deeper"}},
      {"a JSON array not closed",
       "a.json",
       "[\n" + good + ",\n" + good,
       {"a.json:3: the JSON array is not closed"}},
      {"a huge number",
       "a.jsonl",
       good + "\n{\"text\": \"x\", \"n\": 1e400}\n",
       {"a.jsonl:2: not valid JSON", "number overflow"}},
      {"a text file with bad UTF-8", "a.txt", "fine\nnot \xc3\x28 fine\n", {"a.txt:2: not valid UTF-8"}},
  };
}

TEST(CorruptData, EachRecordIsAnErrorNamingFileAndLine) {
  for (const DataCase& c : data_cases()) {
    SCOPED_TRACE(c.name);
    ScratchDir dir("faults-data");
    write_bytes(dir / c.file, c.content);
    std::vector<std::string> parts = {"[data] " + (dir / c.file).string()};
    parts.insert(parts.end(), c.message.begin(), c.message.end());
    try {
      load_text_documents({dir / c.file}, data_setup().options());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 800u) << e.what();
    }
  }
}

// With skip_malformed the bad record is skipped and counted, the good one kept; the warning that
// names it must not print the record itself (that is what overflowed the stack).
TEST(CorruptData, SkipMalformedSkipsAndCountsWithoutPrintingTheValue) {
  for (const DataCase& c : data_cases()) {
    if (c.file != "a.jsonl" && c.file != "t.jsonl") continue;
    SCOPED_TRACE(c.name);
    ScratchDir dir("faults-data-skip");
    write_bytes(dir / c.file, c.content);
    TextDataOptions options = data_setup().options();
    options.skip_malformed = true;
    TextDataStats stats;
    const std::vector<Document> docs = load_text_documents({dir / c.file}, options, &stats);
    EXPECT_EQ(docs.size(), 1u);
    EXPECT_EQ(stats.skipped_malformed, 1);
  }
}

TEST(CorruptData, EveryValidSeedRecordLoads) {
  ScratchDir dir("faults-data-valid");
  for (const std::string& record : data_records()) {
    SCOPED_TRACE(record);
    write_bytes(dir / "one.jsonl", record + "\n");
    EXPECT_EQ(load_text_documents({dir / "one.jsonl"}, data_setup().options()).size(), 1u);
  }
}

// ---- chat templates ----

TEST(CorruptChatTemplate, TruncatedAndDeepTemplatesAreErrorsNamingTheTemplate) {
  const std::string source = chat_template_source();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {source.substr(0, source.size() / 2), "chat.jinja:"},
      {"{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}",
       "nested deeper than 256 levels"},
      {"{% for m in messages %}\n{{ m" + std::string(5000, '|') + " }}{% endfor %}", "chat.jinja:2:"},
      {[] {
         std::string blocks;
         for (int i = 0; i < 1000; ++i) blocks += "{% if x %}\n";
         return blocks;
       }(),
       "nested deeper than 256 levels"},
      {"{{ 'unterminated }}", "unterminated string"},
  };
  for (const auto& [text, part] : cases)
    EXPECT_TRUE(
        throws_with([&] { jinja::Template::parse(text, "chat.jinja"); }, {"[jinja] chat.jinja:", part}));
}

}  // namespace
}  // namespace ferry::faults
