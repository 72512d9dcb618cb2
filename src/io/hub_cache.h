// `model: org/name` as Hugging Face tools resolve it: a model already downloaded into the local hub
// cache (huggingface_hub's layout), found without a network:
//
//   <hub>/models--org--name/refs/main             the commit the "main" revision points to
//   <hub>/models--org--name/snapshots/<commit>/   the model directory (files link into blobs/)
//
// <hub> is $HUGGINGFACE_HUB_CACHE, else $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; every one that is set is searched,
// in that order.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ferry {

// "org/name": two non-empty parts of letters, digits, '-', '_' and '.', not "." or "..".
bool looks_like_hub_repo_id(const std::string& text);

// The hub cache directories to search, in order (see above), from the environment.
std::vector<std::filesystem::path> hub_cache_dirs();

// The snapshot directory of `repo_id` (refs/main's commit; or the only snapshot when refs/main is
// missing); nullopt when no cache holds it. `looked` (when given) receives the paths tried.
std::optional<std::filesystem::path> find_hub_snapshot(const std::string& repo_id,
                                                       const std::vector<std::filesystem::path>& hub_dirs,
                                                       std::vector<std::filesystem::path>* looked = nullptr);

// `model` as given when it exists (a directory, relative to the working directory); otherwise, when
// it looks like org/name, its snapshot in the hub cache. Throws ferry::Error listing every place
// it looked, and how to download it, when a repo id is found nowhere. Other paths are returned as
// they are (the model loader reports them).
std::filesystem::path resolve_model_path(const std::filesystem::path& model);

}  // namespace ferry
