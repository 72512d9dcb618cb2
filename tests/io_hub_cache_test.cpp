// `model: org/name` found in a Hugging Face hub cache laid out as huggingface_hub writes it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "io/hub_cache.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(HubCache, RepoIdsAreOrgSlashName) {
  EXPECT_TRUE(looks_like_hub_repo_id("meta-llama/Llama-3.2-1B"));
  EXPECT_TRUE(looks_like_hub_repo_id("Qwen/Qwen2.5-7B-Instruct"));
  EXPECT_FALSE(looks_like_hub_repo_id("model"));
  EXPECT_FALSE(looks_like_hub_repo_id("/abs/model"));
  EXPECT_FALSE(looks_like_hub_repo_id("./model"));
  EXPECT_FALSE(looks_like_hub_repo_id("a/b/c"));
  EXPECT_FALSE(looks_like_hub_repo_id("../model"));
}

TEST(HubCache, FindsTheSnapshotRefsMainNames) {
  test::ScratchDir dir("hub-cache");
  const auto repo = dir / "hub" / "models--org--tiny-model";
  std::filesystem::create_directories(repo / "snapshots" / "abc123");
  std::filesystem::create_directories(repo / "snapshots" / "old999");
  std::filesystem::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "abc123";  // no newline, as huggingface_hub writes it
  std::vector<std::filesystem::path> looked;
  const auto found = find_hub_snapshot("org/tiny-model", {dir / "empty", dir / "hub"}, &looked);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, repo / "snapshots" / "abc123");
  EXPECT_EQ(looked.size(), 2u);
  EXPECT_FALSE(find_hub_snapshot("org/other", {dir / "hub"}).has_value());
}

TEST(HubCache, ResolvesThroughTheEnvironmentOrSaysWhereItLooked) {
  test::ScratchDir dir("hub-env");
  const auto snapshot = dir / "home" / "hub" / "models--org--m" / "snapshots" / "c0ffee";
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(dir / "home" / "hub" / "models--org--m" / "refs");
  std::ofstream(dir / "home" / "hub" / "models--org--m" / "refs" / "main") << "c0ffee\n";
  ::setenv("HF_HOME", (dir / "home").c_str(), 1);
  EXPECT_EQ(resolve_model_path("org/m"), snapshot);
  EXPECT_TRUE(
      test::throws_with([] { resolve_model_path("org/missing"); },
                        {"org/missing", "models--org--missing", "HF_HOME", "huggingface-cli download"}));
  ::unsetenv("HF_HOME");
  // An existing directory, or a path that is no repo id, is left alone.
  EXPECT_EQ(resolve_model_path(dir.path()), dir.path());
  EXPECT_EQ(resolve_model_path("/no/such/model"), std::filesystem::path("/no/such/model"));
}

}  // namespace
}  // namespace ferry
