// Pre-tokenized JSONL loading: valid records, every malformed-line error, skip_malformed, eos.
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/token_dataset.h"
#include "test_util.h"

namespace ferry {
namespace {

// `text` contains `needle` (gtest only: the tests do not link gmock).
::testing::AssertionResult has(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  \"" << text << "\"\ndoes not contain\n  \"" << needle << "\"";
}

std::filesystem::path write_file(const test::ScratchDir& dir, const std::string& name,
                                 const std::string& text) {
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The message of the ferry::Error that `body` throws ("" and a test failure when it throws none).
std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ferry::Error";
  return "";
}

class TokenDatasetTest : public ::testing::Test {
 protected:
  test::ScratchDir dir{"token-dataset"};

  // Loads a one-file dataset whose line `bad_line_no` is `bad`, preceded by valid lines; returns the error.
  std::string error_for_line(const std::string& bad, const TokenDataOptions& options = {},
                             int bad_line_no = 2) {
    std::string text;
    for (int i = 1; i < bad_line_no; ++i) text += "{\"input_ids\": [1, 2, 3]}\n";
    text += bad + "\n{\"input_ids\": [4]}\n";
    const auto path = write_file(dir, "train.jsonl", text);
    return error_of([&] { load_token_jsonl(path, options); });
  }
  std::string prefix(int line = 2) const {
    return "[data] " + (dir / "train.jsonl").string() + ":" + std::to_string(line) + ": ";
  }
};

TEST_F(TokenDatasetTest, ReadsIdsAndLabels) {
  const auto path = write_file(dir, "train.jsonl",
                               "{\"input_ids\": [5, 6, 7], \"labels\": [-100, 6, 7]}\n"
                               "\n"
                               "   \n"
                               "{\"input_ids\": [8, 9], \"attention_mask\": [1, 1]}\r\n"
                               "{\"labels\": null, \"input_ids\": [10]}");  // no final newline
  TokenDataStats stats;
  const auto docs = load_token_jsonl(path, {}, &stats);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].input_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(docs[0].labels, (std::vector<int32_t>{-100, 6, 7}));
  // Labels default to the ids; other keys are ignored; null labels count as absent.
  EXPECT_EQ(docs[1].input_ids, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(docs[1].labels, docs[1].input_ids);
  EXPECT_EQ(docs[2].labels, (std::vector<int32_t>{10}));
  EXPECT_EQ(stats.lines, 5);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.tokens, 6);
  EXPECT_EQ(stats.skipped_malformed, 0);
}

TEST_F(TokenDatasetTest, IgnoresAByteOrderMark) {
  const auto path = write_file(dir, "bom.jsonl", "\xEF\xBB\xBF{\"input_ids\": [1]}\n");
  EXPECT_EQ(load_token_jsonl(path, {}).size(), 1u);
}

TEST_F(TokenDatasetTest, LabelsOfAnotherLengthNameFileAndLine) {
  // The example of the error policy, verbatim: line 17 of the file.
  const std::string bad =
      "{\"input_ids\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14], \"labels\": [1,2,3,4,5,6,7,8,9,10,11,12]}";
  EXPECT_EQ(error_for_line(bad, {}, 17),
            prefix(17) + "'labels' has 12 entries but 'input_ids' has 14; they must be the same length");
}

TEST_F(TokenDatasetTest, NotJson) {
  const std::string e = error_for_line("{input_ids: [1, 2]}");
  EXPECT_TRUE(has(e, prefix() + "not valid JSON ("));
  EXPECT_TRUE(has(e, "each line must be one JSON object such as {\"input_ids\": [1, 2, 3]}"));
  EXPECT_FALSE(has(e, "json.exception"));
  // Two objects on one line is not one JSON value either.
  EXPECT_TRUE(has(error_for_line("{\"input_ids\": [1]} {\"input_ids\": [2]}"), prefix() + "not valid JSON"));
}

TEST_F(TokenDatasetTest, NotAnObject) {
  EXPECT_EQ(error_for_line("[1, 2, 3]"),
            prefix() + "a JSON array, not an object; each line must be an object with an 'input_ids' array");
  EXPECT_TRUE(has(error_for_line("42"), prefix() + "a JSON number, not an object"));
}

TEST_F(TokenDatasetTest, MissingInputIds) {
  EXPECT_EQ(error_for_line("{\"text\": \"hello\", \"labels\": [1]}"),
            prefix() +
                "no 'input_ids' (keys found: 'labels', 'text'); pre-tokenized data needs an 'input_ids' "
                "array of token ids on every line");
  EXPECT_TRUE(has(error_for_line("{}"), "no 'input_ids' (keys found: none)"));
}

TEST_F(TokenDatasetTest, InputIdsNotAnArrayOrEmpty) {
  EXPECT_EQ(error_for_line("{\"input_ids\": \"1 2 3\"}"),
            prefix() + "'input_ids' is \"1 2 3\" (string), not an array of token ids");
  EXPECT_EQ(error_for_line("{\"input_ids\": []}"),
            prefix() + "'input_ids' is empty; a document needs at least one token");
}

TEST_F(TokenDatasetTest, NonIntegerIds) {
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2.5, 3]}"),
            prefix() + "'input_ids'[1] is 2.5, not an integer token id");
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2, \"3\"]}"),
            prefix() + "'input_ids'[2] is \"3\", not an integer token id");
  EXPECT_EQ(error_for_line("{\"input_ids\": [true]}"),
            prefix() + "'input_ids'[0] is true, not an integer token id");
  EXPECT_EQ(error_for_line("{\"input_ids\": [null]}"),
            prefix() + "'input_ids'[0] is null, not an integer token id");
  EXPECT_EQ(error_for_line("{\"input_ids\": [2.0]}"),
            prefix() + "'input_ids'[0] is 2.0, not an integer token id");
  EXPECT_EQ(error_for_line("{\"input_ids\": [4294967296]}"),
            prefix() + "'input_ids'[0] is 4294967296, too large for a token id");
}

TEST_F(TokenDatasetTest, IdsOutOfRange) {
  EXPECT_EQ(error_for_line("{\"input_ids\": [-1, 2]}"),
            prefix() + "'input_ids'[0] is -1; token ids must be >= 0");
  TokenDataOptions vocab;
  vocab.vocab_size = 100;
  EXPECT_EQ(error_for_line("{\"input_ids\": [0, 99, 100]}", vocab),
            prefix() +
                "'input_ids'[2] is 100, outside the vocabulary [0, 100); was the data tokenized for "
                "another model?");
  // Without a vocabulary size, large ids are accepted.
  EXPECT_EQ(load_token_jsonl(write_file(dir, "big.jsonl", "{\"input_ids\": [150000]}\n"), {}).size(), 1u);
}

TEST_F(TokenDatasetTest, BadLabels) {
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2], \"labels\": \"1 2\"}"),
            prefix() + "'labels' is \"1 2\" (string), not an array");
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2], \"labels\": [1, 0.5]}"),
            prefix() + "'labels'[1] is 0.5, not an integer (a token id, or -100 to mask the token)");
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2], \"labels\": [-1, 2]}"),
            prefix() + "'labels'[0] is -1; a label must be a token id or -100 (masked)");
  TokenDataOptions vocab;
  vocab.vocab_size = 10;
  EXPECT_EQ(error_for_line("{\"input_ids\": [1, 2], \"labels\": [-100, 12]}", vocab),
            prefix() + "'labels'[1] is 12, outside the vocabulary [0, 10)");
}

TEST_F(TokenDatasetTest, LongValuesAreShortenedInMessages) {
  std::string long_string(100, 'x');
  const std::string e = error_for_line("{\"input_ids\": \"" + long_string + "\"}");
  EXPECT_TRUE(has(e, "xxx... (string)"));
  EXPECT_LT(e.size(), 200u);
}

TEST_F(TokenDatasetTest, SkipMalformedCountsAndLogsEachLine) {
  const auto path = write_file(dir, "mixed.jsonl",
                               "{\"input_ids\": [1, 2]}\n"
                               "not json\n"
                               "{\"input_ids\": [3], \"labels\": [3, 4]}\n"
                               "\n"
                               "{\"input_ids\": [5]}\n"
                               "{\"input_ids\": [-7]}\n");
  TokenDataOptions options;
  options.skip_malformed = true;
  TokenDataStats stats;
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Warn);
  ::testing::internal::CaptureStderr();
  const auto docs = load_token_jsonl(path, options, &stats);
  const std::string log = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].input_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(docs[1].input_ids, (std::vector<int32_t>{5}));
  EXPECT_EQ(stats.skipped_malformed, 3);
  EXPECT_EQ(stats.documents, 2);
  EXPECT_EQ(stats.lines, 6);
  // Never silent: one warning per skipped line, with its number and reason, and a summary.
  EXPECT_TRUE(has(log, "mixed.jsonl:2: not valid JSON"));
  EXPECT_TRUE(has(log, "mixed.jsonl:3: 'labels' has 2 entries but 'input_ids' has 1"));
  EXPECT_TRUE(has(log, "mixed.jsonl:6: 'input_ids'[0] is -7"));
  EXPECT_TRUE(has(log, "skipped 3 malformed line(s) of 6"));
  // Without the flag, the first bad line stops the load.
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl(path, {}); }), "mixed.jsonl:2: not valid JSON"));
}

TEST_F(TokenDatasetTest, NoDocumentsIsAnError) {
  const auto empty = write_file(dir, "empty.jsonl", "\n\n");
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl(empty, {}); }),
                  "empty.jsonl holds no documents (2 line(s), 0 skipped as malformed)"));
  const auto all_bad = write_file(dir, "bad.jsonl", "x\ny\n");
  TokenDataOptions skip;
  skip.skip_malformed = true;
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Off);
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl(all_bad, skip); }),
                  "bad.jsonl holds no documents (2 line(s), 2 skipped as malformed)"));
  set_log_level(saved);
}

TEST_F(TokenDatasetTest, UnreadableFiles) {
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl(dir / "missing.jsonl", {}); }),
                  "[data] cannot open " + (dir / "missing.jsonl").string() + ": No such file"));
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl(dir.path(), {}); }), "is a directory"));
}

TEST_F(TokenDatasetTest, AppendsEosWhenMissing) {
  const auto path = write_file(dir, "eos.jsonl",
                               "{\"input_ids\": [5, 6], \"labels\": [-100, 6]}\n"
                               "{\"input_ids\": [7, 2]}\n"
                               "{\"input_ids\": [8, 9], \"labels\": [-100, -100]}\n");
  TokenDataOptions options;
  options.eos_token_id = 2;
  TokenDataStats stats;
  const auto docs = load_token_jsonl(path, options, &stats);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].input_ids, (std::vector<int32_t>{5, 6, 2}));
  EXPECT_EQ(docs[0].labels, (std::vector<int32_t>{-100, 6, 2}));
  EXPECT_EQ(docs[1].input_ids, (std::vector<int32_t>{7, 2}));  // already ends with eos
  EXPECT_EQ(docs[1].labels, (std::vector<int32_t>{7, 2}));
  EXPECT_EQ(docs[2].labels,
            (std::vector<int32_t>{-100, -100, 2}));  // eos is trained even after a masked tail
  EXPECT_EQ(stats.eos_appended, 2);
  EXPECT_EQ(stats.tokens, 8);

  options.vocab_size = 2;
  EXPECT_EQ(error_of([&] { load_token_jsonl(path, options); }),
            "[data] eos_token_id 2 is outside the vocabulary [0, 2)");
  options.vocab_size = 0;
  options.eos_token_id = -1;
  EXPECT_EQ(error_of([&] { load_token_jsonl(path, options); }),
            "[data] eos_token_id is -1; token ids must be >= 0");
}

TEST_F(TokenDatasetTest, SeveralFilesInOrder) {
  const auto a = write_file(dir, "a.jsonl", "{\"input_ids\": [1]}\n{\"input_ids\": [2]}\n");
  const auto b = write_file(dir, "b.jsonl", "{\"input_ids\": [3, 4]}\n");
  TokenDataStats stats;
  const auto docs = load_token_jsonl_files({a, b}, {}, &stats);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].input_ids[0], 1);
  EXPECT_EQ(docs[1].input_ids[0], 2);
  EXPECT_EQ(docs[2].input_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.lines, 3);
  EXPECT_EQ(stats.tokens, 4);
  // An error names the file it is in.
  const auto bad = write_file(dir, "c.jsonl", "{\"input_ids\": [1]}\n{\"input_ids\": [1.5]}\n");
  EXPECT_EQ(error_of([&] {
              load_token_jsonl_files({a, bad}, {});
            }),
            "[data] " + bad.string() + ":2: 'input_ids'[0] is 1.5, not an integer token id");
  EXPECT_TRUE(has(error_of([&] { load_token_jsonl_files({}, {}); }), "no data files given"));
}

TEST(TokenRecord, ParsesOneLine) {
  Document doc;
  EXPECT_EQ(parse_token_record("{\"input_ids\": [3, 1]}", {}, &doc), "");
  EXPECT_EQ(doc.labels, (std::vector<int32_t>{3, 1}));
  EXPECT_TRUE(append_eos(&doc, 9));
  EXPECT_FALSE(append_eos(&doc, 9));
  EXPECT_EQ(doc.input_ids, (std::vector<int32_t>{3, 1, 9}));
}

}  // namespace
}  // namespace ferry
