// cuDNN, loaded at run time: ferry runs without it, and uses it where it is installed.
//
// cuDNN's fused attention engines run two to three times as fast as ferry's own flash attention
// kernels on Hopper, but the library is large (about 1 GB with its engines) and not on every
// machine. So it is not linked: the first use opens libcudnn_graph.so.9 (the graph API, which loads
// its engine libraries itself) from the first place that has it (ops/cudnn_search_paths.h: the
// loader's path, cuDNN's and CUDA's usual homes, PyTorch's wheels), and resolves the dozen
// functions the backend API needs. When it is missing, or older than 9.0, library() returns
// nullptr and unavailable_reason() says why; the callers then run their own kernels.
//
// FERRY_CUDNN=0 in the environment keeps it unloaded (for A/B comparisons and to rule it out).
#pragma once

#include <cudnn_graph.h>

#include <string>

namespace ferry::cudnn {

struct Library {
  size_t version = 0;  // cudnnGetVersion(), e.g. 91400
  std::string path;    // what was opened
  decltype(&::cudnnGetVersion) get_version = nullptr;
  decltype(&::cudnnGetErrorString) get_error_string = nullptr;
  decltype(&::cudnnGetLastErrorString) get_last_error_string = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnDestroy) destroy = nullptr;
  decltype(&::cudnnSetStream) set_stream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&::cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&::cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&::cudnnBackendFinalize) finalize = nullptr;
  decltype(&::cudnnBackendExecute) execute = nullptr;
};

// The library, opened on the first call (thread-safe); nullptr when it is not available.
const Library* library();
// Why library() is nullptr ("" when it is not).
const std::string& unavailable_reason();

}  // namespace ferry::cudnn
