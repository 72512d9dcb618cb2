#include "ops/cuda/cudnn_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "core/env_switch.h"
#include "ops/cudnn_search_paths.h"

namespace ferry::cudnn {

namespace {

// The oldest cuDNN whose graph API has the fused attention patterns ferry builds.
constexpr size_t kMinimumVersion = 90000;

struct Loaded {
  std::unique_ptr<Library> library;
  std::string reason;
};

template <typename F>
bool resolve(void* handle, const char* name, F& out, std::string& reason) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (out == nullptr && reason.empty()) reason = fmt::format("{} has no {}", kCudnnGraphLibrary, name);
  return out != nullptr;
}

Loaded load() {
  Loaded loaded;
  if (!env_switch_on("FERRY_CUDNN")) {
    loaded.reason = std::string("FERRY_CUDNN=") + std::getenv("FERRY_CUDNN");
    return loaded;
  }
  // Kept open for the life of the process: plans and handles made from it outlive any one user.
  void* handle = nullptr;
  std::string path, first_error;
  const std::vector<std::string> candidates = cudnn_library_candidates();
  for (const std::string& candidate : candidates) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path = candidate;
      break;
    }
    const char* why = dlerror();
    if (first_error.empty() && candidate == kCudnnGraphLibrary) first_error = why ? why : "dlopen failed";
  }
  if (handle == nullptr) {
    loaded.reason = fmt::format(
        "{} is not on the library path nor in {} other places ferry looks ({}); set "
        "FERRY_CUDNN_LIBRARY to it",
        kCudnnGraphLibrary, candidates.size() - 1, first_error);
    return loaded;
  }
  auto lib = std::make_unique<Library>();
  lib->path = path;
  std::string reason;
  bool ok = resolve(handle, "cudnnGetVersion", lib->get_version, reason);
  ok &= resolve(handle, "cudnnGetErrorString", lib->get_error_string, reason);
  ok &= resolve(handle, "cudnnGetLastErrorString", lib->get_last_error_string, reason);
  ok &= resolve(handle, "cudnnCreate", lib->create, reason);
  ok &= resolve(handle, "cudnnDestroy", lib->destroy, reason);
  ok &= resolve(handle, "cudnnSetStream", lib->set_stream, reason);
  ok &= resolve(handle, "cudnnBackendCreateDescriptor", lib->create_descriptor, reason);
  ok &= resolve(handle, "cudnnBackendDestroyDescriptor", lib->destroy_descriptor, reason);
  ok &= resolve(handle, "cudnnBackendSetAttribute", lib->set_attribute, reason);
  ok &= resolve(handle, "cudnnBackendGetAttribute", lib->get_attribute, reason);
  ok &= resolve(handle, "cudnnBackendFinalize", lib->finalize, reason);
  ok &= resolve(handle, "cudnnBackendExecute", lib->execute, reason);
  if (!ok) {
    loaded.reason = reason;
    return loaded;
  }
  lib->version = lib->get_version();
  if (lib->version < kMinimumVersion) {
    loaded.reason = fmt::format("cuDNN {} is older than 9.0", lib->version);
    return loaded;
  }
  loaded.library = std::move(lib);
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const Library* library() {
  return loaded().library.get();
}

const std::string& unavailable_reason() {
  return loaded().reason;
}

}  // namespace ferry::cudnn
