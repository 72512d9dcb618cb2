// Where ferry looks for cuDNN's graph library (ops/cuda/cudnn_library.h opens the first that
// loads): core/library_search.h's order with FERRY_CUDNN_LIBRARY, CUDNN_PATH/CUDNN_HOME and the
// nvidia-cudnn wheel.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/library_search.h"

namespace ferry {

inline constexpr const char* kCudnnGraphLibrary = "libcudnn_graph.so.9";

inline LibrarySearch cudnn_graph_search() {
  return {kCudnnGraphLibrary, "FERRY_CUDNN_LIBRARY", {"CUDNN_PATH", "CUDNN_HOME"}, "nvidia/cudnn/lib"};
}

// `getenv` returns nullptr for an unset variable; `glob` lists the paths a pattern matches.
inline std::vector<std::string> cudnn_library_candidates(
    const std::function<const char*(const char*)>& getenv,
    const std::function<std::vector<std::string>(const std::string&)>& glob) {
  return library_candidates(cudnn_graph_search(), getenv, glob);
}
// The same from this process's environment and file system.
inline std::vector<std::string> cudnn_library_candidates() {
  return library_candidates(cudnn_graph_search());
}

}  // namespace ferry
