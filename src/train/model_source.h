// Where a run's model comes from (`model:`): a Hugging Face model directory, or `preset:ARCH/NAME`
// -- one of ferry init's presets (train/model_init.h), or preset:DIR, the shape of DIR's
// config.json -- its weights made at random in memory from
// the run's seed, for benchmarks of shapes whose weights the disk cannot hold (a 70B model is 140 GB
// of bf16). Such a run trains random weights, not the published model, and every model directory it
// writes says so: config.json carries "ferry_random_init" and an _name_or_path naming the preset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/model_config.h"
#include "model/model_weights.h"

namespace ferry {

inline constexpr const char* kPresetModelPrefix = "preset:";

// Whether `model` names a preset ("preset:llama/llama-3.1-8b"), or random weights of a
// directory's config.json ("preset:DIR": a shape of one's own, e.g. a preset's config from
// `ferry init --config-only` with a longer max_position_embeddings).
bool is_preset_model(const std::filesystem::path& model);
// preset:DIR's directory (one holding a config.json), or empty.
std::filesystem::path preset_config_dir(const std::filesystem::path& model);
// The model's configuration: config.json of the directory, or the preset's, labelled (see above).
// A malformed or unknown preset is an error listing the presets.
ModelConfig model_source_config(const std::filesystem::path& model, uint64_t seed);
// The model's weights in fp32: read from the directory, or the preset's random initialisation.
ModelWeights model_source_weights(const std::filesystem::path& model, uint64_t seed);
// The same weights, read (or drawn) one unit at a time when asked (ModelWeights::deferred), after
// every check that reading them all would make.
ModelWeights deferred_model_source_weights(const std::filesystem::path& model, uint64_t seed);
// The directory whose tokenizer and generation files an output copies: `model`, or empty for a
// preset (it has none).
std::filesystem::path model_source_dir(const std::filesystem::path& model);

}  // namespace ferry
