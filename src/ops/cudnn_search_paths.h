// Where ferry looks for cuDNN's graph library (ops/cuda/cudnn_library.h opens the first that
// loads), in this order:
//  1. FERRY_CUDNN_LIBRARY: the library file itself, or the directory holding it;
//  2. "libcudnn_graph.so.9" by name: LD_LIBRARY_PATH and the system's library cache;
//  3. CUDNN_PATH and CUDNN_HOME, each's lib64 and lib;
//  4. the CUDA toolkit: CUDA_HOME's and /usr/local/cuda's lib64 and lib;
//  5. the nvidia-cudnn wheels PyTorch installs (python3.*/{site,dist}-packages/nvidia/cudnn/lib)
//     under a virtualenv, a conda prefix, the user's ~/.local, /usr/local and /usr.
// Most users of ferry also have PyTorch, whose wheels carry cuDNN where the loader does not look;
// the library's own RUNPATH ($ORIGIN) then finds its engine libraries beside it.
//
// Plain C++ (no CUDA): the order is a pure function of the environment and of what the globs
// match, tested without a GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ferry {

inline constexpr const char* kCudnnGraphLibrary = "libcudnn_graph.so.9";

// `getenv` returns nullptr for an unset variable; `glob` lists the paths a pattern matches.
std::vector<std::string> cudnn_library_candidates(
    const std::function<const char*(const char*)>& getenv,
    const std::function<std::vector<std::string>(const std::string&)>& glob);
// The same from this process's environment and file system.
std::vector<std::string> cudnn_library_candidates();

}  // namespace ferry
