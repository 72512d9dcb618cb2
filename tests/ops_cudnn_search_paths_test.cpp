// The places ferry looks for cuDNN (ops/cudnn_search_paths.h), from a made-up environment and
// file system: the explicit setting first, then the loader, cuDNN's and CUDA's homes, and the
// wheels PyTorch installs.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ops/cudnn_search_paths.h"

namespace ferry {
namespace {

std::vector<std::string> candidates(const std::map<std::string, std::string>& env,
                                    const std::map<std::string, std::vector<std::string>>& files = {}) {
  return cudnn_library_candidates(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      [&](const std::string& pattern) {
        auto it = files.find(pattern);
        return it == files.end() ? std::vector<std::string>{} : it->second;
      });
}

TEST(CudnnSearchPaths, WithNothingSetTheLoaderThenCudaThenSystemWheels) {
  const std::vector<std::string> expected = {"libcudnn_graph.so.9",
                                             "/usr/local/cuda/lib64/libcudnn_graph.so.9",
                                             "/usr/local/cuda/lib/libcudnn_graph.so.9"};
  EXPECT_EQ(candidates({}), expected);
}

TEST(CudnnSearchPaths, TheExplicitSettingComesFirstAsAFileOrADirectory) {
  EXPECT_EQ(candidates({{"FERRY_CUDNN_LIBRARY", "/opt/cudnn/libcudnn_graph.so.9.14.0"}})[0],
            "/opt/cudnn/libcudnn_graph.so.9.14.0");
  EXPECT_EQ(candidates({{"FERRY_CUDNN_LIBRARY", "/opt/cudnn/lib/"}})[0],
            "/opt/cudnn/lib/libcudnn_graph.so.9");
  EXPECT_EQ(candidates({{"FERRY_CUDNN_LIBRARY", "/opt/cudnn/lib"}})[1], "libcudnn_graph.so.9");
}

TEST(CudnnSearchPaths, CudnnAndCudaHomesThenPyTorchWheelsWithoutRepeats) {
  const std::string venv_wheel = "/home/u/venv/lib/python3.12/site-packages/nvidia/cudnn/lib";
  const std::string user_wheel = "/home/u/.local/lib/python3.11/site-packages/nvidia/cudnn/lib";
  const std::vector<std::string> got =
      candidates({{"CUDNN_PATH", "/opt/cudnn"},
                  {"CUDA_HOME", "/usr/local/cuda"},
                  {"VIRTUAL_ENV", "/home/u/venv"},
                  {"HOME", "/home/u"}},
                 {{"/home/u/venv/lib/python3*/site-packages/nvidia/cudnn/lib", {venv_wheel}},
                  {"/home/u/.local/lib/python3*/site-packages/nvidia/cudnn/lib", {user_wheel}}});
  const std::vector<std::string> expected = {
      "libcudnn_graph.so.9",
      "/opt/cudnn/lib64/libcudnn_graph.so.9",
      "/opt/cudnn/lib/libcudnn_graph.so.9",
      "/usr/local/cuda/lib64/libcudnn_graph.so.9",  // CUDA_HOME and the default, once
      "/usr/local/cuda/lib/libcudnn_graph.so.9",
      venv_wheel + "/libcudnn_graph.so.9",
      user_wheel + "/libcudnn_graph.so.9",
  };
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace ferry
