#include "io/hub_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "model";

std::optional<std::filesystem::path> env_path(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::filesystem::path(value);
}

bool is_dir(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

// The first line of refs/main: the commit hash.
std::string read_ref(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string ref;
  std::getline(in, ref);
  while (!ref.empty() && std::isspace(static_cast<unsigned char>(ref.back()))) ref.pop_back();
  return ref;
}

}  // namespace

bool looks_like_hub_repo_id(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  auto part_ok = [](const std::string& part) {
    if (part.empty() || part == "." || part == "..") return false;
    return std::all_of(part.begin(), part.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
  };
  return part_ok(text.substr(0, slash)) && part_ok(text.substr(slash + 1));
}

std::vector<std::filesystem::path> hub_cache_dirs() {
  std::vector<std::filesystem::path> dirs;
  auto add = [&](std::optional<std::filesystem::path> p) {
    if (p && std::find(dirs.begin(), dirs.end(), *p) == dirs.end()) dirs.push_back(*p);
  };
  add(env_path("HUGGINGFACE_HUB_CACHE"));
  add(env_path("HF_HUB_CACHE"));
  if (auto home = env_path("HF_HOME")) add(*home / "hub");
  if (auto xdg = env_path("XDG_CACHE_HOME")) add(*xdg / "huggingface" / "hub");
  if (auto home = env_path("HOME")) add(*home / ".cache" / "huggingface" / "hub");
  return dirs;
}

std::optional<std::filesystem::path> find_hub_snapshot(const std::string& repo_id,
                                                       const std::vector<std::filesystem::path>& hub_dirs,
                                                       std::vector<std::filesystem::path>* looked) {
  const size_t slash = repo_id.find('/');
  const std::string folder = "models--" + repo_id.substr(0, slash) + "--" + repo_id.substr(slash + 1);
  for (const auto& hub : hub_dirs) {
    const std::filesystem::path repo = hub / folder;
    if (looked) looked->push_back(repo);
    if (!is_dir(repo)) continue;
    const std::string ref = read_ref(repo / "refs" / "main");
    if (!ref.empty() && is_dir(repo / "snapshots" / ref)) return repo / "snapshots" / ref;
    // Downloaded at a pinned revision only: the one snapshot there is the model.
    std::vector<std::filesystem::path> snapshots;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(repo / "snapshots", ec))
      if (entry.is_directory()) snapshots.push_back(entry.path());
    if (snapshots.size() == 1) return snapshots[0];
  }
  return std::nullopt;
}

std::filesystem::path resolve_model_path(const std::filesystem::path& model) {
  std::error_code ec;
  if (model.empty() || std::filesystem::exists(model, ec) || !looks_like_hub_repo_id(model.string()))
    return model;
  std::vector<std::filesystem::path> looked;
  if (auto snapshot = find_hub_snapshot(model.string(), hub_cache_dirs(), &looked)) return *snapshot;
  std::string places = "\n  " + std::filesystem::absolute(model, ec).string() + " (a local directory)";
  for (const auto& p : looked) places += "\n  " + p.string();
  fail(kWhere,
       "model '{}' is neither a directory nor in the Hugging Face cache; looked in:{}\ndownload it first "
       "(huggingface-cli download {}), set HF_HOME or HUGGINGFACE_HUB_CACHE to the cache that holds it, or "
       "give the model directory's path",
       model.string(), places, model.string());
}

}  // namespace ferry
