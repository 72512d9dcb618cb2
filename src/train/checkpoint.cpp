#include "train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "io/atomic_file.h"
#include "io/completion_marker.h"
#include "io/replace_directory.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "optim/state_arrays.h"
#include "train/output_dir.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";

std::optional<int64_t> checkpoint_step(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  // More than 18 digits cannot be a step ferry saved (and would overflow int64).
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, std::filesystem::path>> complete_checkpoints(
    const std::filesystem::path& output_dir) {
  std::vector<std::pair<int64_t, std::filesystem::path>> found;
  if (!std::filesystem::is_directory(output_dir)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(output_dir)) {
    if (!entry.is_directory()) continue;
    auto step = checkpoint_step(entry.path());
    if (step && is_marked_complete(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// An integer field of trainer_state.json: a float (1e15 parses as one), a negative number or a
// string is a corrupt or hand-edited state, never truncated or trusted.
int64_t state_integer(const nlohmann::json& value, const std::filesystem::path& dir, const char* field) {
  FERRY_CHECK(
      value.is_number_integer() && value.get<int64_t>() >= 0, kWhere,
      "{}/{}: '{}' is {}, not a non-negative integer; the checkpoint is corrupt: resume from an earlier "
      "checkpoint (delete this one) or start a new output_dir",
      dir.string(), kStateFile, field, value.dump());
  return value.get<int64_t>();
}

std::string lean_tensor_name(const std::string& unit, const char* array) {
  return "lean." + unit + "." + array;
}

// The optimizer state format a checkpoint's optimizer file holds (files without the key: fp32),
// refused unless it is `expected`.
void check_state_format(const SafetensorsFile& file, const std::filesystem::path& dir,
                        OptimizerStateFormat expected) {
  const auto it = file.metadata().find("optimizer_state");
  const std::string saved = it == file.metadata().end() ? "fp32" : it->second;
  FERRY_CHECK(saved == state_format_name(expected), kWhere,
              "{} holds optimizer state in the format {}, and this run asks for optimizer_state: {}; set "
              "optimizer_state: {} to resume from it, or start a new output_dir",
              dir.string(), saved, state_format_name(expected), saved);
}

// The files of a checkpoint, into its temporary directory; the completion marker last.
void write_checkpoint_files(const std::filesystem::path& temp_dir, const CheckpointView& view) {
  write_hf_model_dir(temp_dir, view.source_dir, *view.config, *view.layout, view.masters, view.save_dtype,
                     view.max_shard_bytes, view.streamed.masters, view.streamed.encoded);

  std::vector<TensorToWrite> tensors;
  if (!is_exact(view.optimizer_state)) {
    const std::vector<StateArraySpec> specs = state_arrays(view.optimizer_state);
    for (size_t u = 0; u < view.layout->units.size(); ++u) {
      const std::vector<size_t> bytes =
          unit_state_array_bytes(view.optimizer_state, static_cast<size_t>(view.layout->units[u].numel));
      for (size_t k = 0; k < specs.size(); ++k) {
        TensorToWrite t{lean_tensor_name(view.layout->units[u].name, specs[k].name),
                        DType::U8,
                        {static_cast<int64_t>(bytes[k])},
                        nullptr};
        if (!view.lean[u].empty()) {
          FERRY_ASSERT(view.lean[u][k].size() == bytes[k], "a lean array of state_array_bytes");
          t.data = view.lean[u][k].data();
        } else {
          t.fetch = [&view, u, k] { return static_cast<const void*>(view.streamed.arrays(u)[k].data()); };
        }
        tensors.push_back(std::move(t));
      }
    }
    write_safetensors(
        temp_dir / kOptimizerFile, tensors,
        {{"format", "ferry-optimizer"}, {"optimizer_state", state_format_name(view.optimizer_state)}});
  } else {
    const std::pair<const char*, const std::vector<const float*>*> groups[] = {
        {"master.", &view.masters}, {"exp_avg.", &view.m}, {"exp_avg_sq.", &view.v}};
    // Unit by unit (a resume reads the tensors by name), so that a streamed unit's three arrays
    // come from one read of its state.
    for (size_t u = 0; u < view.layout->units.size(); ++u)
      for (size_t k = 0; k < 3; ++k) {
        const auto& [prefix, buffers] = groups[k];
        for (const auto& p : view.layout->units[u].params) {
          TensorToWrite t{prefix + p.hf_name, DType::F32, p.shape, nullptr};
          if ((*buffers)[u] != nullptr)
            t.data = (*buffers)[u] + p.offset;
          else  // the arrays are master, m, v: the groups' order
            t.fetch = [&view, u, k, offset = p.offset] {
              return static_cast<const void*>(
                  reinterpret_cast<const float*>(view.streamed.arrays(u)[k].data()) + offset);
            };
          tensors.push_back(std::move(t));
        }
      }
    write_safetensors(temp_dir / kOptimizerFile, tensors, {{"format", "ferry-optimizer"}});
  }

  nlohmann::json state = {
      {"format_version", kFormatVersion},
      {"step", view.state.step},
      {"data_position", {{"epoch", view.state.data_epoch}, {"index", view.state.data_index}}},
      {"fingerprint", view.state.fingerprint},
  };
  write_file_atomic(temp_dir / kStateFile, state.dump(2) + "\n");
  mark_complete(temp_dir);
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir, const CheckpointView& view,
                                      int64_t keep) {
  const auto final_dir = output_dir / fmt::format("checkpoint-{}", view.state.step);
  StagedDirectory staged(final_dir);

  try {
    write_checkpoint_files(staged.path(), view);
  } catch (const std::exception& e) {
    // Error (a full disk, from AtomicFile) or filesystem_error (a directory operation).
    fail(kWhere, "saving {} failed, and its partial files were removed: {}; {}", final_dir.string(), e.what(),
         what_survives_a_failed_save(output_dir));
  }

  // Replace an older checkpoint of the same step only once the new one is complete, and in one
  // step where the file system can (io/replace_directory.h): two renames (old aside, new in) leave
  // a moment with no checkpoint of this step, which the next run's recovery puts right.
  staged.replace();

  if (keep > 0) {
    auto all = complete_checkpoints(output_dir);
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
      if (all[i].second == final_dir) continue;
      remove_marked_directory(all[i].second);
    }
  }
  return final_dir;
}

std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& output_dir) {
  auto all = complete_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string what_survives_a_failed_save(const std::filesystem::path& output_dir) {
  const auto latest = find_latest_checkpoint(output_dir);
  if (latest)
    return fmt::format(
        "the input model and the newest complete checkpoint, {}, are untouched: free disk space, then "
        "continue from that checkpoint with resume=true",
        latest->string());
  return "the input model is untouched, but this run has no complete checkpoint to resume from, so what it "
         "trained ends with it: free disk space (or choose an output_dir on a larger disk) and train again; "
         "save_steps: N keeps checkpoints to resume from";
}

namespace {

// trainer_state.json of a complete checkpoint, checked.
TrainerState read_trainer_state(const std::filesystem::path& dir) {
  FERRY_CHECK(
      is_marked_complete(dir), kWhere,
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
  FERRY_CHECK(state.is_object(), kWhere, "{}/{}: not a JSON object; the checkpoint is corrupt", dir.string(),
              kStateFile);
  const nlohmann::json version = state.value("format_version", nlohmann::json());
  FERRY_CHECK(version == kFormatVersion, kWhere,
              "{}: checkpoint format version {} is not the one this ferry reads ({})", dir.string(),
              version.dump(), kFormatVersion);

  // Each field present and of its type, or the state is corrupt (named, with what to do).
  const auto field = [&](const nlohmann::json& object, const char* key, const char* name,
                         bool (nlohmann::json::*is)() const noexcept) -> const nlohmann::json& {
    FERRY_CHECK(
        json_has(object, key, is), kWhere,
        "{}/{}: '{}' is missing or of another type; the checkpoint is corrupt: resume from an earlier "
        "checkpoint (delete this one) or start a new output_dir",
        dir.string(), kStateFile, name);
    return object[key];
  };
  TrainerState s;
  const nlohmann::json& position = field(state, "data_position", "data_position", &nlohmann::json::is_object);
  s.step = state_integer(field(state, "step", "step", &nlohmann::json::is_number), dir, "step");
  s.data_epoch = state_integer(field(position, "epoch", "data_position.epoch", &nlohmann::json::is_number),
                               dir, "data_position.epoch");
  s.data_index = state_integer(field(position, "index", "data_position.index", &nlohmann::json::is_number),
                               dir, "data_position.index");
  // Without a fingerprint (null, or absent in an early format) nothing is compared; one of another
  // type would compare nothing either, so it is refused.
  const bool fingerprinted = state.contains("fingerprint") && !state["fingerprint"].is_null();
  s.fingerprint = fingerprinted ? field(state, "fingerprint", "fingerprint", &nlohmann::json::is_object)
                                : nlohmann::json::object();
  // The directory's name is the step it was saved at; a state that disagrees was not written by
  // this checkpoint's save.
  const std::optional<int64_t> named = checkpoint_step(dir);
  FERRY_CHECK(
      !named || *named == s.step, kWhere,
      "{}/{}: the state says step {} but the checkpoint is named for step {}; the checkpoint is corrupt: "
      "resume from an earlier checkpoint (delete this one) or start a new output_dir",
      dir.string(), kStateFile, s.step, *named);
  return s;
}

}  // namespace

TrainerState load_checkpoint(const std::filesystem::path& dir, const ModelLayout& layout,
                             OptimizerStateFormat format,
                             const std::vector<std::vector<std::span<std::byte>>>& given,
                             const StreamedState& streamed) {
  const TrainerState s = read_trainer_state(dir);
  SafetensorsFile file = SafetensorsFile::open(dir / kOptimizerFile);
  check_state_format(file, dir, format);
  const std::vector<StateArraySpec> specs = state_arrays(format);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    // A streamed unit's arrays are the buffer's: filled whole, then stored.
    const bool stream = given[u].empty();
    const std::vector<std::span<std::byte>> lean = !stream                 ? given[u]
                                                   : streamed.fresh_arrays ? streamed.fresh_arrays(u)
                                                                           : streamed.arrays(u);
    for (size_t k = 0; k < specs.size(); ++k) {
      const std::string name = lean_tensor_name(layout.units[u].name, specs[k].name);
      const TensorInfo* info = file.find(name);
      FERRY_CHECK(info != nullptr, kWhere,
                  "{}: optimizer state has no tensor '{}'; the checkpoint belongs to another model",
                  dir.string(), name);
      FERRY_CHECK(
          info->dtype == DType::U8 && info->bytes == lean[k].size(), kWhere,
          "{}: tensor '{}' is {} {} ({} bytes), expected U8 of {} bytes; the checkpoint belongs to another "
          "model",
          dir.string(), name, dtype_name(info->dtype), shape_to_string(info->shape), info->bytes,
          lean[k].size());
      std::memcpy(lean[k].data(), file.data(*info), info->bytes);
    }
    if (stream) streamed.store(u);
  }
  return s;
}

TrainerState load_checkpoint(const std::filesystem::path& dir, const ModelLayout& layout,
                             const std::vector<float*>& masters, const std::vector<float*>& m,
                             const std::vector<float*>& v, const StreamedState& streamed) {
  const TrainerState s = read_trainer_state(dir);
  SafetensorsFile file = SafetensorsFile::open(dir / kOptimizerFile);
  check_state_format(file, dir, OptimizerStateFormat::Fp32);
  const char* prefixes[] = {"master.", "exp_avg.", "exp_avg_sq."};
  // Unit by unit, so that a streamed unit's three arrays are filled in its buffer and stored once.
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const bool stream = masters[u] == nullptr;
    const std::vector<std::span<std::byte>> arrays = !stream ? std::vector<std::span<std::byte>>{}
                                                     : streamed.fresh_arrays ? streamed.fresh_arrays(u)
                                                                             : streamed.arrays(u);
    for (size_t k = 0; k < 3; ++k) {
      const std::string prefix = prefixes[k];
      float* base = stream ? reinterpret_cast<float*>(arrays[k].data())
                           : (k == 0   ? masters
                              : k == 1 ? m
                                       : v)[u];
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
    if (stream) streamed.store(u);
  }
  return s;
}

}  // namespace ferry
