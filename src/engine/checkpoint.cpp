#include "engine/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "engine/output_dir.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kCompleteMarker = "COMPLETE";

std::optional<int64_t> checkpoint_step(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, std::filesystem::path>> complete_checkpoints(
    const std::filesystem::path& output_dir) {
  std::vector<std::pair<int64_t, std::filesystem::path>> found;
  if (!std::filesystem::is_directory(output_dir)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(output_dir)) {
    if (!entry.is_directory()) continue;
    auto step = checkpoint_step(entry.path());
    if (step && std::filesystem::exists(entry.path() / kCompleteMarker))
      found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Deletes a checkpoint directory, its completion marker first: remove_all's order is the
// directory's, and a kill partway through must not leave a directory marked complete that has
// lost its weights or optimizer state.
void remove_checkpoint(const std::filesystem::path& dir) {
  std::filesystem::remove(dir / kCompleteMarker);
  sync_directory(dir);
  std::filesystem::remove_all(dir);
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir, const CheckpointView& view,
                                      int64_t keep) {
  const auto final_dir = output_dir / fmt::format("checkpoint-{}", view.state.step);
  const auto temp_dir = output_dir / fmt::format("checkpoint-{}.tmp", view.state.step);
  std::filesystem::remove_all(temp_dir);
  std::filesystem::create_directories(temp_dir);

  write_hf_model_dir(temp_dir, view.source_dir, *view.config, *view.layout, view.masters, view.save_dtype,
                     view.max_shard_bytes);

  std::vector<TensorToWrite> tensors;
  const std::pair<const char*, const std::vector<const float*>*> groups[] = {
      {"master.", &view.masters}, {"exp_avg.", &view.m}, {"exp_avg_sq.", &view.v}};
  for (const auto& [prefix, buffers] : groups) {
    for (size_t u = 0; u < view.layout->units.size(); ++u)
      for (const auto& p : view.layout->units[u].params)
        tensors.push_back(TensorToWrite{prefix + p.hf_name, DType::F32, p.shape, (*buffers)[u] + p.offset});
  }
  write_safetensors(temp_dir / kOptimizerFile, tensors, {{"format", "ferry-optimizer"}});

  nlohmann::json state = {
      {"format_version", kFormatVersion},
      {"step", view.state.step},
      {"data_position", {{"epoch", view.state.data_epoch}, {"index", view.state.data_index}}},
      {"fingerprint", view.state.fingerprint},
  };
  write_file_atomic(temp_dir / kStateFile, state.dump(2) + "\n");
  write_file_atomic(temp_dir / kCompleteMarker, "complete\n");
  sync_directory(temp_dir);

  // Replace an older checkpoint of the same step only once the new one is complete, and in one
  // step: two renames (old aside, new in) leave a moment with no checkpoint of this step, and a
  // kill there resumes from an earlier one, or from none.
  if (std::filesystem::exists(final_dir)) {
    if (exchange_paths(temp_dir, final_dir)) {
      remove_checkpoint(temp_dir);  // the old one, under the temporary name no resume reads
    } else {
      const auto old_dir = output_dir / fmt::format("checkpoint-{}.old", view.state.step);
      std::filesystem::remove_all(old_dir);
      std::filesystem::rename(final_dir, old_dir);
      std::filesystem::rename(temp_dir, final_dir);
      remove_checkpoint(old_dir);
    }
  } else {
    std::filesystem::rename(temp_dir, final_dir);
  }
  sync_directory(output_dir);

  if (keep > 0) {
    auto all = complete_checkpoints(output_dir);
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
      if (all[i].second == final_dir) continue;
      remove_checkpoint(all[i].second);
    }
  }
  return final_dir;
}

std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& output_dir) {
  auto all = complete_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

TrainerState load_checkpoint(const std::filesystem::path& dir, const ModelLayout& layout,
                             const std::vector<float*>& masters, const std::vector<float*>& m,
                             const std::vector<float*>& v) {
  FERRY_CHECK(
      std::filesystem::exists(dir / kCompleteMarker), kWhere,
      "{} has no {} marker: it was not written completely; resume from an earlier checkpoint or delete it",
      dir.string(), kCompleteMarker);
  std::ifstream in(dir / kStateFile);
  FERRY_CHECK(in.good(), kWhere, "{}: cannot read {}", dir.string(), kStateFile);
  nlohmann::json state;
  try {
    in >> state;
  } catch (const nlohmann::json::exception& e) {
    fail(kWhere, "{}/{}: not valid JSON ({}); the checkpoint is corrupt", dir.string(), kStateFile, e.what());
  }
  FERRY_CHECK(state.value("format_version", 0) == kFormatVersion, kWhere,
              "{}: checkpoint format version {} is not the one this ferry reads ({})", dir.string(),
              state.value("format_version", 0), kFormatVersion);

  SafetensorsFile file = SafetensorsFile::open(dir / kOptimizerFile);
  const std::pair<const char*, const std::vector<float*>*> groups[] = {
      {"master.", &masters}, {"exp_avg.", &m}, {"exp_avg_sq.", &v}};
  for (const auto& [prefix, buffers] : groups) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      float* base = (*buffers)[u];
      std::fill(base, base + layout.units[u].numel, 0.0f);
      for (const auto& p : layout.units[u].params) {
        const std::string name = prefix + p.hf_name;
        const TensorInfo* info = file.find(name);
        FERRY_CHECK(info != nullptr, kWhere,
                    "{}: optimizer state has no tensor '{}'; the checkpoint belongs to "
                    "another model",
                    dir.string(), name);
        FERRY_CHECK(info->dtype == DType::F32 && info->shape == p.shape, kWhere,
                    "{}: tensor '{}' is {} {}, expected F32 {}", dir.string(), name, dtype_name(info->dtype),
                    shape_to_string(info->shape), shape_to_string(p.shape));
        std::memcpy(base + p.offset, file.data(*info), info->bytes);
      }
    }
  }
  TrainerState s;
  try {
    s.step = state.at("step").get<int64_t>();
    s.data_epoch = state.at("data_position").at("epoch").get<int64_t>();
    s.data_index = state.at("data_position").at("index").get<int64_t>();
    s.fingerprint = state.value("fingerprint", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    fail(kWhere, "{}/{}: missing or malformed field ({}); the checkpoint is corrupt", dir.string(),
         kStateFile, e.what());
  }
  return s;
}

}  // namespace ferry
