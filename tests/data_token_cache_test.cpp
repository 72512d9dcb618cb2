// The token cache: round trip over several shards, completeness by index.json, damage and
// fingerprint mismatches reported, and SHA-256 against the FIPS test vectors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/sha256.h"
#include "data/token_cache.h"
#include "test_util.h"

namespace ferry {
namespace {

std::vector<Document> sample_documents() {
  std::vector<Document> docs;
  for (int d = 0; d < 7; ++d) {
    Document doc;
    for (int t = 0; t < 3 + 5 * d; ++t) {
      doc.input_ids.push_back(d * 100 + t);
      doc.labels.push_back(t < 2 ? kIgnoreIndex : d * 100 + t);
    }
    docs.push_back(doc);
  }
  return docs;
}

void expect_same(const std::vector<Document>& a, const std::vector<Document>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids) << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << i;
  }
}

TEST(TokenCache, RoundTripOverShards) {
  test::ScratchDir scratch("cache");
  const auto dir = scratch / "abc";
  EXPECT_FALSE(read_token_cache(dir, "abc").has_value());
  const auto docs = sample_documents();
  write_token_cache(dir, "abc", docs, {{"note", "test"}}, /*shard_tokens=*/40);
  nlohmann::json index;
  const auto back = read_token_cache(dir, "abc", &index);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, docs);
  EXPECT_GT(index["shards"].size(), 2u);
  EXPECT_EQ(index["documents"], 7);
  EXPECT_EQ(index["info"]["note"], "test");
  // Nothing but the cache is left behind (no staging directory, no .tmp files).
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(scratch.path()))
    entries += e.path().filename() != "abc";
  EXPECT_EQ(entries, 0u);
  for (const auto& e : std::filesystem::directory_iterator(dir)) EXPECT_NE(e.path().extension(), ".tmp");
  // Writing again keeps the existing cache.
  const auto before = std::filesystem::last_write_time(dir / "index.json");
  write_token_cache(dir, "abc", {}, {});
  EXPECT_EQ(std::filesystem::last_write_time(dir / "index.json"), before);
  expect_same(*read_token_cache(dir, "abc"), docs);
}

TEST(TokenCache, EmptyDocumentListAndLongDocument) {
  test::ScratchDir scratch("cache-empty");
  write_token_cache(scratch / "e", "e", {}, {});
  EXPECT_TRUE(read_token_cache(scratch / "e", "e")->empty());
  auto docs = sample_documents();
  write_token_cache(scratch / "l", "l", docs, {}, /*shard_tokens=*/1);  // each document a shard of its own
  expect_same(*read_token_cache(scratch / "l", "l"), docs);
}

std::string error_of(const std::filesystem::path& dir, const std::string& fingerprint) {
  try {
    read_token_cache(dir, fingerprint);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenCache, DamageAndMismatchAreErrors) {
  test::ScratchDir scratch("cache-bad");
  const auto dir = scratch / "fp";
  write_token_cache(dir, "fp", sample_documents(), {});
  EXPECT_NE(error_of(dir, "other").find("made for fingerprint"), std::string::npos);
  std::filesystem::resize_file(dir / "shard-00000.bin",
                               std::filesystem::file_size(dir / "shard-00000.bin") - 4);
  EXPECT_NE(error_of(dir, "fp").find("wrong size"), std::string::npos) << error_of(dir, "fp");
  std::filesystem::remove(dir / "shard-00000.bin");
  EXPECT_NE(error_of(dir, "fp").find("missing"), std::string::npos);
  std::ofstream(dir / "index.json") << "{";
  EXPECT_NE(error_of(dir, "fp").find("not valid JSON"), std::string::npos);
}

// Numbers in a damaged cache are never trusted: a count is checked against the files' sizes before
// anything is allocated for it, and every offset against the shard's tokens before it is read.
TEST(TokenCache, ImpossibleCountsAndOffsetsAreDamageNotACrash) {
  test::ScratchDir scratch("cache-corrupt");
  const auto dir = scratch / "fp";
  write_token_cache(dir, "fp", sample_documents(), {});
  const std::string index_text = test::read_file(dir / "index.json");
  for (const char* documents : {"1e18", "-1", "18446744073709551615", "\"7\""}) {
    nlohmann::json index = nlohmann::json::parse(index_text);
    index["documents"] = nlohmann::json::parse(documents);
    std::ofstream(dir / "index.json") << index.dump();
    const std::string error = error_of(dir, "fp");
    EXPECT_NE(error.find("is damaged"), std::string::npos) << documents << ": " << error;
  }
  std::ofstream(dir / "index.json") << index_text;
  expect_same(*read_token_cache(dir, "fp"), sample_documents());
  // The first document's end far beyond the shard's tokens, header and file size intact.
  {
    std::fstream shard(dir / "shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    const int64_t far = int64_t{1} << 20;
    shard.seekp(32 + 8);
    shard.write(reinterpret_cast<const char*>(&far), sizeof(far));
  }
  EXPECT_NE(error_of(dir, "fp").find("bad document offsets"), std::string::npos) << error_of(dir, "fp");
}

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;
  const std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i)
    h.update(chunk.substr(0, 1 + i % 999)), h.update(chunk.substr(0, 999 - i % 999));
  // 1000 * 1000 'a' in uneven pieces
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  test::ScratchDir scratch("sha");
  std::ofstream(scratch / "f", std::ios::binary) << "abc";
  EXPECT_EQ(sha256_file(scratch / "f"), sha256_hex("abc"));
}

}  // namespace
}  // namespace ferry
