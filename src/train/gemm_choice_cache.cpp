#include "train/gemm_choice_cache.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "core/text_file.h"
#include "io/atomic_file.h"
#include "train/profile_cache.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "GEMM choices";

// The file's choices for `scope`: none for a missing file; nullopt, with *why_not set, for one
// that cannot be used.
std::optional<std::vector<GemmChoice>> try_read(const std::filesystem::path& file, const std::string& scope,
                                                std::string* why_not) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::vector<GemmChoice>{};
  std::string text;
  try {
    text = read_text_file(file, kWhere);
  } catch (const Error& e) {
    *why_not = e.what();
    return std::nullopt;
  }
  std::string error;
  const std::optional<nlohmann::json> json = try_parse_json(text, &error);
  if (!json) {
    *why_not = file.string() + ": " + error;
    return std::nullopt;
  }
  if (!json_has(*json, "choices", &nlohmann::json::is_array)) {
    *why_not = file.string() + " is not a GEMM-choice file (no \"choices\" list)";
    return std::nullopt;
  }
  const std::string its_scope = json_has(*json, "scope", &nlohmann::json::is_string)
                                    ? json->at("scope").get<std::string>()
                                    : std::string();
  if (its_scope != scope) {
    *why_not = file.string() + " holds the choices of \"" + its_scope + "\", not of \"" + scope + "\"";
    return std::nullopt;
  }
  std::vector<GemmChoice> choices;
  for (const nlohmann::json& entry : json->at("choices")) {
    if (!json_has(entry, "problem", &nlohmann::json::is_string) ||
        !json_has(entry, "candidate", &nlohmann::json::is_number_unsigned) ||
        !json_has(entry, "config", &nlohmann::json::is_string)) {
      *why_not =
          file.string() + " has a choice without a problem, a candidate or a config: " + json_excerpt(entry);
      return std::nullopt;
    }
    choices.push_back({entry.at("problem").get<std::string>(), entry.at("candidate").get<size_t>(),
                       entry.at("config").get<std::string>()});
  }
  return merge_gemm_choices({}, choices);
}

}  // namespace

std::filesystem::path default_gemm_choice_dir() {
  return default_cache_dir("gemm-choices");
}

std::filesystem::path gemm_choice_cache_path(const std::filesystem::path& dir, const std::string& scope) {
  return dir / (cache_file_name_part(scope) + ".json");
}

std::vector<GemmChoice> read_gemm_choices(const std::filesystem::path& file, const std::string& scope) {
  std::string why_not;
  std::optional<std::vector<GemmChoice>> choices = try_read(file, scope, &why_not);
  if (choices) return std::move(*choices);
  log_warn("GEMM choices: {}; the products are tuned again and the file written anew", why_not);
  return {};
}

void write_gemm_choices(const std::filesystem::path& file, const std::string& scope,
                        const std::vector<GemmChoice>& choices) {
  nlohmann::json list = nlohmann::json::array();
  for (const GemmChoice& choice : choices)
    list.push_back({{"problem", choice.problem}, {"candidate", choice.candidate}, {"config", choice.config}});
  const nlohmann::json json = {{"scope", scope}, {"choices", std::move(list)}};
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  FERRY_CHECK(!ec, kWhere, "cannot create {}: {}", file.parent_path().string(), ec.message());
  write_file_atomic(file, json.dump(1) + "\n");
}

std::vector<GemmChoice> merge_gemm_choices(const std::vector<GemmChoice>& kept,
                                           const std::vector<GemmChoice>& added) {
  std::map<std::string, GemmChoice> by_problem;
  for (const GemmChoice& choice : kept) by_problem[choice.problem] = choice;
  for (const GemmChoice& choice : added) by_problem[choice.problem] = choice;
  std::vector<GemmChoice> merged;
  merged.reserve(by_problem.size());
  for (auto& entry : by_problem) merged.push_back(std::move(entry.second));
  return merged;
}

GemmChoiceCache::GemmChoiceCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

GemmChoiceCache::Scope& GemmChoiceCache::scope(const std::string& name) {
  auto found = scopes_.find(name);
  if (found != scopes_.end()) return found->second;
  Scope& scope = scopes_[name];
  if (dir_.empty() || name.empty()) return scope;
  scope.file = gemm_choice_cache_path(dir_, name);
  scope.kept = read_gemm_choices(scope.file, name);
  return scope;
}

const std::vector<GemmChoice>& GemmChoiceCache::kept(const std::string& scope_name) {
  return scope(scope_name).kept;
}

void GemmChoiceCache::keep(const std::string& scope_name, const std::vector<GemmChoice>& settled) {
  if (dir_.empty() || scope_name.empty() || settled.empty()) return;
  Scope& kept = scope(scope_name);
  if (merge_gemm_choices(kept.kept, settled) == kept.kept) return;
  // Another run may have kept choices since this one read the file: they stay.
  std::string why_not;
  const std::vector<GemmChoice> on_disk =
      try_read(kept.file, scope_name, &why_not).value_or(std::vector<GemmChoice>{});
  std::vector<GemmChoice> merged = merge_gemm_choices(merge_gemm_choices(kept.kept, on_disk), settled);
  try {
    write_gemm_choices(kept.file, scope_name, merged);
    log_debug("GEMM choices: {} products' algorithms kept in {}", merged.size(), kept.file.string());
  } catch (const Error& e) {
    if (!write_failed_)
      log_warn("GEMM choices: not kept, so the next run tunes its products again: {}", e.what());
    write_failed_ = true;
  }
  // Written or not, these are known now: the steps after do not write them again.
  kept.kept = std::move(merged);
}

void GemmChoiceCache::lend(Ops& ops) {
  const std::string scope_name = ops.gemm_choice_scope();
  const std::vector<GemmChoice>& choices = kept(scope_name);
  if (choices.empty()) return;
  ops.adopt_gemm_choices(choices);
  log_debug("GEMM choices: {} products take the algorithms chosen before ({})", choices.size(),
            scope(scope_name).file.string());
}

void GemmChoiceCache::keep(const Ops& ops) {
  if (dir_.empty()) return;
  const std::vector<GemmChoice> settled = ops.gemm_choices();
  if (!settled.empty()) keep(ops.gemm_choice_scope(), settled);
}

}  // namespace ferry
