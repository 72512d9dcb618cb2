// `ferry init`: random-initialised Hugging Face model directories, from presets that carry the real
// shapes of well-known models (for benchmarks and planning) or tiny ones (for tests and the demo).
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"

namespace ferry {

struct ModelPreset {
  std::string name;  // e.g. "tiny", "llama-3.1-8b"
  std::string description;
};

// The presets valid for an architecture ("llama", "mistral", "qwen2", "qwen3").
std::vector<ModelPreset> model_presets(const std::string& arch);

// The configuration of `preset` for `arch`; errors list the valid names.
ModelConfig preset_config(const std::string& arch, const std::string& preset);

// Fills parameters as transformers' _init_weights does: linear and embedding weights
// ~ N(0, initializer_range), norm weights 1, biases 0. Deterministic in `seed`: the same values on
// every machine, build and thread count (core/normal_fill.h).
void init_random_weights(const ModelConfig& config, uint64_t seed, std::vector<std::vector<float>>& units);
// Unit `unit`'s values of init_random_weights(config, seed), alone, into `out` (the unit's numel
// floats, every one written): for a run that reads its weights one unit at a time.
void init_random_unit(const ModelConfig& config, const ModelLayout& layout, uint64_t seed, size_t unit,
                      std::span<float> out);

// Creates DIR with config.json, model.safetensors (in config.dtype) and generation_config.json; the
// weights are made a piece at a time as they are written, so memory stays at a few pieces.
void write_random_model(const ModelConfig& config, uint64_t seed, const std::filesystem::path& out_dir);

// Creates DIR with config.json and generation_config.json alone: what `ferry plan` and `ferry
// profile` read, without writing (or holding in memory) the weights of a large preset.
void write_model_config_only(const ModelConfig& config, const std::filesystem::path& out_dir);

}  // namespace ferry
