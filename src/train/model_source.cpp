#include "train/model_source.h"

#include <fmt/format.h>

#include "core/error.h"
#include "train/model_init.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "model";

struct PresetName {
  std::string arch, preset;
};

PresetName parse_preset(const std::filesystem::path& model) {
  const std::string text = model.string().substr(std::string(kPresetModelPrefix).size());
  const size_t slash = text.find('/');
  FERRY_CHECK(
      slash != std::string::npos && slash > 0 && slash + 1 < text.size(), kWhere,
      "'{}' is not a preset: write model: preset:ARCH/NAME, e.g. preset:llama/llama-3.1-8b (ferry init "
      "--arch ARCH --list shows the names), or preset:DIR for a directory holding a config.json",
      model.string());
  return {text.substr(0, slash), text.substr(slash + 1)};
}

}  // namespace

bool is_preset_model(const std::filesystem::path& model) {
  return model.string().rfind(kPresetModelPrefix, 0) == 0;
}

ModelConfig model_source_config(const std::filesystem::path& model, uint64_t seed) {
  if (!is_preset_model(model)) return load_model_config(model);
  const std::filesystem::path dir = preset_config_dir(model);
  nlohmann::json raw;
  std::string shape;
  if (!dir.empty()) {
    // A shape of one's own (a longer context, fewer layers): the directory's config.json, weights
    // made at random all the same.
    raw = load_model_config(dir).raw;
    shape = fmt::format("config {}", (dir / "config.json").string());
    raw["_name_or_path"] = fmt::format("ferry-random-init/{}", dir.filename().string());
  } else {
    const PresetName name = parse_preset(model);
    raw = preset_config(name.arch, name.preset).raw;
    shape = fmt::format("{} preset {}", name.arch, name.preset);
    raw["_name_or_path"] = fmt::format("ferry-random-init/{}/{}", name.arch, name.preset);
  }
  raw["ferry_random_init"] = fmt::format(
      "random weights (seed {}) of the {}'s shape, trained by ferry: not the published model", seed, shape);
  return parse_model_config(raw, model.string());
}

std::filesystem::path preset_config_dir(const std::filesystem::path& model) {
  if (!is_preset_model(model)) return {};
  std::filesystem::path dir = model.string().substr(std::string(kPresetModelPrefix).size());
  if (!dir.has_filename()) dir = dir.parent_path();  // "preset:DIR/": the name labels the outputs
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "config.json", ec) ? dir : std::filesystem::path();
}

ModelWeights model_source_weights(const std::filesystem::path& model, uint64_t seed) {
  ModelWeights w = deferred_model_source_weights(model, seed);
  w.load_all();
  return w;
}

ModelWeights deferred_model_source_weights(const std::filesystem::path& model, uint64_t seed) {
  if (!is_preset_model(model)) return deferred_model_weights(model);
  ModelWeights w;
  w.config = model_source_config(model, seed);
  w.layout = build_model_layout(w.config);
  w.loader = [config = w.config, layout = w.layout, seed](size_t unit, std::span<float> out) {
    init_random_unit(config, layout, seed, unit, out);
  };
  return w;
}

std::filesystem::path model_source_dir(const std::filesystem::path& model) {
  return is_preset_model(model) ? std::filesystem::path() : model;
}

}  // namespace ferry
