// Resumable checkpoints (DESIGN.md §4): OUTPUT/checkpoint-STEP/ holds a loadable Hugging Face model
// directory, optimizer.safetensors (fp32 master.<name>, exp_avg.<name>, exp_avg_sq.<name> for every
// parameter; with a lean optimizer_state, lean.<unit>.<array> for every unit and array of
// state_arrays(format), U8 bytes as the run holds them, and __metadata__ optimizer_state) and
// trainer_state.json (step, data position, seed, run fingerprint). It is written
// under a temporary name, fsynced, renamed, and marked complete by a COMPLETE file written last;
// a directory without the marker is never resumed from.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/unit_layout.h"
#include "optim/state_format.h"

namespace ferry {

struct TrainerState {
  int64_t step = 0;        // optimizer steps completed
  int64_t data_epoch = 0;  // position of the next row to read
  int64_t data_index = 0;
  nlohmann::json fingerprint;  // what must match for an exact resume (data, batch geometry, seed)
};

// The state of the units a run does not hold in RAM (the disk tier's), one unit at a time through a
// buffer the run has anyway (the tier's), so that saving or resuming needs no RAM copy of it
// (DESIGN.md §2: host memory is held to the plan). Each call's result is valid until the next call.
struct StreamedState {
  // Unit u's state arrays (state_arrays(format) order, each state_array_bytes long).
  std::function<std::vector<std::span<std::byte>>(size_t u)> arrays;
  // A range of unit u's masters as fp32 (model/model_weights.h UnitFetch): the disk units', and a
  // lean format's every unit, decoded one tensor at a time.
  UnitFetch masters;
  // The arrays the last arrays(u) or fresh_arrays(u) gave were overwritten (resume): store them.
  std::function<void(size_t u)> store;
  // For a resume, which overwrites every array whole: unit u's arrays not read first (the disk
  // tier's DiskStateTier::page_new), then store(u). Where absent, arrays(u).
  std::function<std::vector<std::span<std::byte>>(size_t u)> fresh_arrays;
  // A unit's weights in a dtype without reading its state (the disk units' upload copy), or
  // nullptr: a save then reads each disk unit once, for its optimizer state.
  UnitBytes encoded;
};

struct CheckpointView {
  const ModelConfig* config = nullptr;
  const ModelLayout* layout = nullptr;
  std::filesystem::path source_dir;  // input model directory (tokenizer files are copied from it)
  DType save_dtype = DType::BF16;
  size_t max_shard_bytes = size_t{5} << 30;
  std::vector<const float*> masters, m, v;  // masters: fp32 for the HF model (nullptr: streamed.masters)
  OptimizerStateFormat optimizer_state = OptimizerStateFormat::Fp32;
  // A lean format: per unit, its arrays' bytes (state_arrays(optimizer_state) order); m, v unused.
  std::vector<std::vector<std::span<const std::byte>>> lean;
  // A unit whose masters are nullptr (and whose m, v are nullptr, or lean arrays empty) is written
  // from `streamed`, read as its tensors are written.
  StreamedState streamed;
  TrainerState state;
};

// Writes OUTPUT/checkpoint-STEP and then deletes the oldest complete checkpoints beyond
// `keep` (0 keeps all). Returns the checkpoint's path.
std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir, const CheckpointView& view,
                                      int64_t keep);

// The newest complete checkpoint in output_dir, if any.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& output_dir);

// For the message of a save that failed (a checkpoint, the best model, the final model): what of
// the run is left to continue from, and what to do ("the input model and the newest complete
// checkpoint, ..., are untouched: free disk space, then continue ...", or that there is none).
std::string what_survives_a_failed_save(const std::filesystem::path& output_dir);

// Reads a checkpoint into masters/m/v (fp32 buffers laid out by `layout`; a unit whose buffers are
// nullptr into `streamed`'s arrays, then stored); returns its state.
TrainerState load_checkpoint(const std::filesystem::path& checkpoint_dir, const ModelLayout& layout,
                             const std::vector<float*>& masters, const std::vector<float*>& m,
                             const std::vector<float*>& v, const StreamedState& streamed = {});
// Reads a checkpoint of a lean optimizer_state into each unit's arrays (state_arrays(format)
// order, each exactly state_array_bytes long; a unit without arrays into `streamed`'s, then
// stored); returns its state. A checkpoint of another format is refused, naming it.
TrainerState load_checkpoint(const std::filesystem::path& checkpoint_dir, const ModelLayout& layout,
                             OptimizerStateFormat format,
                             const std::vector<std::vector<std::span<std::byte>>>& lean,
                             const StreamedState& streamed = {});

}  // namespace ferry
