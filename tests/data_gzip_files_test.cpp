// Data shipped gzip-compressed (train.jsonl.gz) is read as the file it decompresses to, in every
// reader; a damaged stream is an error naming the file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include "core/error.h"
#include "data/data_file.h"
#include "data/text_dataset.h"
#include "data/token_dataset.h"
#include "test_util.h"

namespace ferry {
namespace {

void write_gzip(const std::filesystem::path& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

TEST(GzipData, NamesAndContent) {
  EXPECT_EQ(data_extension("a/train.jsonl.gz"), ".jsonl");
  EXPECT_EQ(data_extension("notes.txt.gz"), ".txt");
  EXPECT_EQ(data_extension("train.jsonl"), ".jsonl");
  test::ScratchDir dir("gzip-data");
  // Larger than one read chunk, so that the stream is read in pieces.
  std::string content;
  for (int i = 0; i < 200000; ++i) content += "{\"input_ids\": [" + std::to_string(i % 97 + 1) + ", 2]}\n";
  write_gzip(dir / "big.jsonl.gz", content);
  EXPECT_EQ(read_data_file(dir / "big.jsonl.gz"), content);
}

TEST(GzipData, EveryReaderReadsIt) {
  test::ScratchDir dir("gzip-readers");
  write_gzip(dir / "tokens.jsonl.gz",
             "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}\n{\"input_ids\": [4]}\n");
  const auto docs = load_token_jsonl(dir / "tokens.jsonl.gz", {});
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].labels, (std::vector<int32_t>{-100, 2, 3}));
  EXPECT_EQ(docs[1].input_ids, (std::vector<int32_t>{4}));
  EXPECT_EQ(file_data_format(dir / "tokens.jsonl.gz", DataFormat::Auto), DataFormat::Tokens);
  EXPECT_EQ(load_text_documents({dir / "tokens.jsonl.gz"}, TextDataOptions{}).size(), 2u);
  write_gzip(dir / "notes.txt.gz", "plain text");
  EXPECT_EQ(file_data_format(dir / "notes.txt.gz", DataFormat::Auto), DataFormat::Text);
}

TEST(GzipData, ATruncatedFileSaysSo) {
  test::ScratchDir dir("gzip-truncated");
  std::string content(100000, 'x');
  write_gzip(dir / "whole.jsonl.gz", content);
  const std::string bytes = test::read_file(dir / "whole.jsonl.gz");
  std::ofstream(dir / "cut.jsonl.gz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_TRUE(test::throws_with([&] { read_data_file(dir / "cut.jsonl.gz"); }, {"cut.jsonl.gz", "gzip"}));
}

}  // namespace
}  // namespace ferry
