#include "core/library_search.h"

#include <glob.h>

#include <algorithm>
#include <cstdlib>

namespace ferry {

namespace {

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> paths;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return paths;
}

}  // namespace

std::vector<std::string> library_candidates(
    const LibrarySearch& search, const std::function<const char*(const char*)>& getenv,
    const std::function<std::vector<std::string>(const std::string&)>& glob) {
  std::vector<std::string> out;
  auto add = [&](const std::string& path) {
    if (!path.empty() && std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  };
  auto in_dir = [&](const std::string& dir) {
    if (!dir.empty()) add(dir + (dir.ends_with("/") ? "" : "/") + search.file);
  };
  auto var = [&](const std::string& name) -> std::string {
    const char* value = getenv(name.c_str());
    return value != nullptr ? value : "";
  };

  if (const std::string explicit_path = var(search.override_variable); !explicit_path.empty()) {
    if (explicit_path.ends_with(".so") || explicit_path.find(".so.") != std::string::npos)
      add(explicit_path);
    else
      in_dir(explicit_path);
  }
  add(search.file);
  for (const std::string& name : search.home_variables) {
    if (const std::string root = var(name); !root.empty()) {
      in_dir(root + "/lib64");
      in_dir(root + "/lib");
    }
  }
  for (const std::string& root : {var("CUDA_HOME"), std::string("/usr/local/cuda")}) {
    if (root.empty()) continue;
    in_dir(root + "/lib64");
    in_dir(root + "/lib");
  }
  std::vector<std::string> prefixes;
  for (const char* name : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const std::string p = var(name); !p.empty()) prefixes.push_back(p);
  if (const std::string home = var("HOME"); !home.empty()) prefixes.push_back(home + "/.local");
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  for (const std::string& prefix : prefixes)
    for (const char* packages : {"site-packages", "dist-packages"})
      for (const std::string& dir : glob(prefix + "/lib/python3*/" + packages + "/" + search.wheel_dir))
        in_dir(dir);
  return out;
}

std::vector<std::string> library_candidates(const LibrarySearch& search) {
  return library_candidates(
      search, [](const char* name) { return std::getenv(name); }, glob_paths);
}

}  // namespace ferry
