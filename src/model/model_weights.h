// fp32 copies of every unit's parameters in host memory, loaded from and saved to a Hugging Face
// model directory.
#pragma once

#include <filesystem>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"

namespace ferry {

class SafetensorsModel;

// Unit u's fp32 values into `out` (the unit's numel floats): every value, the zeros between its
// parameters (their alignment) too, so that `out` may be memory never written before -- a run
// reads its weights straight into the masters of its optimizer state (UnitUpdater::masters_to_load).
using UnitLoader = std::function<void(size_t unit, std::span<float> out)>;

struct ModelWeights {
  ModelConfig config;
  ModelLayout layout;
  std::vector<std::vector<float>> units;  // units[i] holds layout.units[i].numel values
  // Set where `units` is empty: the units are read on demand, one at a time, so that a run whose
  // state takes the weights over unit by unit holds one unit's fp32 copy, not the model's
  // (4 bytes/param: 30 GiB at 8B, more than the state of a run with most of it on disk).
  UnitLoader loader;

  bool deferred() const { return units.empty() && static_cast<bool>(loader); }
  // Reads every unit that `loader` defers into `units`.
  void load_all();

  static ModelWeights zeros(const ModelConfig& config);
  float* param(size_t unit, std::string_view short_name);
  const float* param(size_t unit, std::string_view short_name) const;
};

// Reads DIR/config.json and the safetensors weights (any float dtype, converted to fp32).
// Every parameter the layout expects must be present with its exact shape; a tensor the layout
// does not know is an error (the checkpoint is for another architecture), except rotary
// inv_freq buffers and a tied model's duplicate lm_head.weight.
ModelWeights load_model_weights(const std::filesystem::path& model_dir);
// The same checks, and a loader that reads each unit when asked (ModelWeights::deferred).
ModelWeights deferred_model_weights(const std::filesystem::path& model_dir);
// The weights of DIR opened, with every name, shape and dtype checked against `layout` (the checks
// load_model_weights makes before it reads anything): for readers that convert unit by unit.
SafetensorsModel open_model_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                    const ModelLayout& layout);
// Every value of `unit` into dst[0, numel): its parameters from `file`, zeros between them.
void read_unit_weights(const SafetensorsModel& file, const UnitLayout& unit, float* dst);

// `count` fp32 values of unit u from element `offset` (a piece of one tensor, at most kF32Piece
// elements: io/safetensors_writer.h), fetched right before they are written and valid until the
// next call: for the units a writer's caller does not hold as fp32 in RAM (the disk tier's, a lean
// format's), given as nullptr. A piece at a time, so a lean format is decoded into a buffer of one
// piece, not of every unit.
using UnitFetch = std::function<const float*(size_t unit, size_t offset, size_t count)>;
// Unit u's parameters already encoded in `dtype` (laid out by the layout's element offsets), or
// nullptr: the run's bf16 upload copy of a unit, which equals its masters converted to that dtype
// between steps, so that saving a disk unit's weights need not read its state from the disk.
using UnitBytes = std::function<const void*(size_t unit, DType dtype)>;

// Writes the parameters of `units` (fp32, laid out by `layout`; a nullptr unit from `encoded` where
// it has the unit's bytes, else from `fetch`) as DIR/model*.safetensors in `dtype`, sharded past
// max_shard_bytes, with an index when sharded.
void save_model_weights(const std::filesystem::path& dir, const ModelLayout& layout,
                        const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                        const UnitFetch& fetch = {}, const UnitBytes& encoded = {});

}  // namespace ferry
