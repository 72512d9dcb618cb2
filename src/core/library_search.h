// Where ferry looks for a shared library it opens at run time (cuDNN's graph library, NCCL), in
// this order:
//  1. the override variable (e.g. FERRY_CUDNN_LIBRARY): the library file itself, or its directory;
//  2. the file by name: LD_LIBRARY_PATH and the system's library cache;
//  3. the library's home variables (e.g. CUDNN_PATH, CUDNN_HOME), each's lib64 and lib;
//  4. the CUDA toolkit: CUDA_HOME's and /usr/local/cuda's lib64 and lib;
//  5. the nvidia-* wheels PyTorch installs (python3.*/{site,dist}-packages/<wheel_dir>) under a
//     virtualenv, a conda prefix, the user's ~/.local, /usr/local and /usr.
// Most users of ferry also have PyTorch, whose wheels carry these libraries where the loader does
// not look; a library's own RUNPATH ($ORIGIN) then finds its companions beside it.
//
// A pure function of the environment and of what the globs match, tested without a GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ferry {

struct LibrarySearch {
  std::string file;                         // "libcudnn_graph.so.9"
  std::string override_variable;            // "FERRY_CUDNN_LIBRARY"
  std::vector<std::string> home_variables;  // {"CUDNN_PATH", "CUDNN_HOME"}
  std::string wheel_dir;                    // "nvidia/cudnn/lib"
};

// `getenv` returns nullptr for an unset variable; `glob` lists the paths a pattern matches.
std::vector<std::string> library_candidates(
    const LibrarySearch& search, const std::function<const char*(const char*)>& getenv,
    const std::function<std::vector<std::string>(const std::string&)>& glob);
// The same from this process's environment and file system.
std::vector<std::string> library_candidates(const LibrarySearch& search);

}  // namespace ferry
