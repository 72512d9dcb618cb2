// GEMM choices kept between runs (train/gemm_choice_cache.h): what one run keeps the next reads,
// one file per scope; nothing is written when nothing changed; two runs keeping at once lose
// neither's choices; a bad, foreign or unwritable file costs a warning and a tuning, never the run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/text_file.h"
#include "test_util.h"
#include "train/gemm_choice_cache.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

const std::string kScope =
    "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, cuBLASLt 130100, 32 MiB workspace, tuned among 6";
const std::string kOtherScope =
    "NVIDIA H200, sm_90, 132 SMs, cuBLASLt 130100, 32 MiB workspace, tuned among 6";

GemmChoice choice(const std::string& problem, size_t candidate) {
  return {problem, candidate, "algo 66 tile " + std::to_string(20 + candidate) + " cluster 3"};
}

TEST(GemmChoiceCache, FileNamedByTheScope) {
  EXPECT_EQ(gemm_choice_cache_path("/c", kScope).filename().string(),
            "nvidia-h100-80gb-hbm3-sm-90-132-sms-cublaslt-130100-32-mib-workspace-tuned-among-6.json");
  EXPECT_NE(gemm_choice_cache_path("/c", kScope), gemm_choice_cache_path("/c", kOtherScope));
}

TEST(GemmChoiceCache, MergeLaysTheAddedOverTheKeptOnePerProblemSorted) {
  const std::vector<GemmChoice> merged =
      merge_gemm_choices({choice("m=2", 0), choice("m=1", 1)}, {choice("m=3", 2), choice("m=2", 4)});
  EXPECT_EQ(merged, (std::vector<GemmChoice>{choice("m=1", 1), choice("m=2", 4), choice("m=3", 2)}));
  EXPECT_EQ(merge_gemm_choices(merged, merged), merged);
  EXPECT_TRUE(merge_gemm_choices({}, {}).empty());
}

TEST(GemmChoiceCache, WrittenThenReadBack) {
  test::ScratchDir dir("gemm-choices");
  const fs::path file = gemm_choice_cache_path(dir / "nested", kScope);
  EXPECT_TRUE(read_gemm_choices(file, kScope).empty()) << "a missing file holds nothing, silently";
  const std::vector<GemmChoice> choices{choice("m=1 n=2 k=3", 0), choice("m=4 n=5 k=6", 5)};
  write_gemm_choices(file, kScope, choices);
  EXPECT_EQ(read_gemm_choices(file, kScope), choices);
}

TEST(GemmChoiceCache, NextRunTakesWhatARunKept) {
  test::ScratchDir dir("gemm-choices");
  const std::vector<GemmChoice> settled{choice("m=1", 2), choice("m=2", 0)};
  {
    GemmChoiceCache run(dir.path());
    EXPECT_TRUE(run.kept(kScope).empty());
    run.keep(kScope, settled);
    EXPECT_EQ(run.kept(kScope), settled);
  }
  GemmChoiceCache next(dir.path());
  EXPECT_EQ(next.kept(kScope), settled);
  EXPECT_TRUE(next.kept(kOtherScope).empty()) << "another GPU or library: its own file";
}

TEST(GemmChoiceCache, NothingWrittenWhenNothingChanged) {
  test::ScratchDir dir("gemm-choices");
  GemmChoiceCache run(dir.path());
  run.keep(kScope, {choice("m=1", 2)});
  const fs::path file = gemm_choice_cache_path(dir.path(), kScope);
  ASSERT_TRUE(fs::exists(file));
  fs::remove(file);
  run.keep(kScope, {choice("m=1", 2)});
  EXPECT_FALSE(fs::exists(file)) << "the same choices again: no write";
  run.keep(kScope, {choice("m=1", 3)});
  ASSERT_TRUE(fs::exists(file)) << "a changed choice is written";
  EXPECT_EQ(read_gemm_choices(file, kScope), std::vector<GemmChoice>{choice("m=1", 3)});
}

TEST(GemmChoiceCache, TwoRunsKeepingAtOnceLoseNeither) {
  test::ScratchDir dir("gemm-choices");
  GemmChoiceCache a(dir.path()), b(dir.path());
  EXPECT_TRUE(a.kept(kScope).empty());
  EXPECT_TRUE(b.kept(kScope).empty());
  a.keep(kScope, {choice("m=1", 1)});
  b.keep(kScope, {choice("m=2", 2)});
  EXPECT_EQ(GemmChoiceCache(dir.path()).kept(kScope),
            (std::vector<GemmChoice>{choice("m=1", 1), choice("m=2", 2)}));
}

TEST(GemmChoiceCache, NoDirectoryOrScopeKeepsNothing) {
  GemmChoiceCache none{fs::path()};
  none.keep(kScope, {choice("m=1", 1)});
  EXPECT_TRUE(none.kept(kScope).empty());
  test::ScratchDir dir("gemm-choices");
  GemmChoiceCache run(dir.path());
  run.keep("", {choice("m=1", 1)});
  EXPECT_TRUE(fs::is_empty(dir.path())) << "ops that do not tune have no scope and nothing to keep";
}

TEST(GemmChoiceCache, ABadOrForeignFileIsReportedAndWrittenAnew) {
  test::ScratchDir dir("gemm-choices");
  const fs::path file = gemm_choice_cache_path(dir.path(), kScope);
  for (const std::string& text : {
           std::string("not json"),
           std::string(R"([1, 2])"),
           std::string(R"({"scope": "NVIDIA H200, another", "choices": []})"),
           std::string(R"({"scope": "no choices"})"),
           std::string(R"({"scope": 5, "choices": []})"),
           std::string(R"({"scope": ")" + kScope + R"(", "choices": [7]})"),
           std::string(R"({"scope": ")" + kScope +
                       R"(", "choices": [{"problem": "m=1", "candidate": -1, "config": "x"}]})"),
           std::string(R"({"scope": ")" + kScope + R"(", "choices": [{"problem": "m=1", "config": "x"}]})"),
       }) {
    SCOPED_TRACE(text);
    std::ofstream(file) << text;
    ::testing::internal::CaptureStderr();
    GemmChoiceCache run(dir.path());
    EXPECT_TRUE(run.kept(kScope).empty());
    const std::string warned = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warned.find(file.string()), std::string::npos) << warned;
    EXPECT_NE(warned.find("tuned again"), std::string::npos) << warned;
    run.keep(kScope, {choice("m=1", 1)});
    EXPECT_EQ(read_gemm_choices(file, kScope), std::vector<GemmChoice>{choice("m=1", 1)}) << "written anew";
  }
}

TEST(GemmChoiceCache, AnUnwritableDirectoryIsReportedOnceNeverFatal) {
  test::ScratchDir dir("gemm-choices");
  const fs::path blocked = dir / "file-not-dir";
  std::ofstream(blocked) << "x";
  GemmChoiceCache run(blocked / "sub");
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(run.keep(kScope, {choice("m=1", 1)}));
  EXPECT_NO_THROW(run.keep(kScope, {choice("m=2", 1)}));
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("not kept"), std::string::npos) << warned;
  EXPECT_EQ(warned.find("not kept"), warned.rfind("not kept")) << "said once: " << warned;
}

}  // namespace
}  // namespace ferry
