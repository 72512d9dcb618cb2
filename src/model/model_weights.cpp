#include "model/model_weights.h"

#include <algorithm>
#include <memory>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace ferry {

ModelWeights ModelWeights::zeros(const ModelConfig& config) {
  ModelWeights w;
  w.config = config;
  w.layout = build_model_layout(config);
  for (const auto& u : w.layout.units) w.units.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  return w;
}

float* ModelWeights::param(size_t unit, std::string_view short_name) {
  return units[unit].data() + layout.units[unit].slot(short_name).offset;
}

const float* ModelWeights::param(size_t unit, std::string_view short_name) const {
  return units[unit].data() + layout.units[unit].slot(short_name).offset;
}

void read_unit_weights(const SafetensorsModel& file, const UnitLayout& unit, float* dst) {
  int64_t written = 0;  // the unit's values before it are written (the params are in offset order)
  for (const auto& p : unit.params) {
    FERRY_ASSERT(p.offset >= written, "a unit's parameters are laid out in order");
    std::fill(dst + written, dst + p.offset, 0.0f);
    file.read_f32(p.hf_name, p.shape, dst + p.offset);
    written = p.offset + p.numel;
  }
  std::fill(dst + written, dst + unit.numel, 0.0f);
}

namespace {

bool ignorable_extra(const std::string& name, const ModelLayout& layout) {
  if (name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0) return true;
  return layout.tied && name == "lm_head.weight";
}

}  // namespace

SafetensorsModel open_model_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                    const ModelLayout& layout) {
  SafetensorsModel file = SafetensorsModel::open(model_dir);
  // Names, shapes and dtypes are all checked before the fp32 copy is allocated: a config.json
  // that disagrees with the weights is reported by tensor, not by an allocation of its sizes.
  std::set<std::string> expected;
  for (const auto& u : layout.units)
    for (const auto& p : u.params) expected.insert(p.hf_name);
  for (const auto& name : file.names()) {
    if (expected.count(name) || ignorable_extra(name, layout)) continue;
    fail("load",
         "{}: the weights hold tensor '{}' that a {} with this config.json does not have; the "
         "config and the weights disagree (wrong config.json, or an unsupported variant)",
         model_dir.string(), name, config.architecture_name);
  }
  for (const auto& name : expected)
    FERRY_CHECK(file.has(name), "load",
                "{}: tensor '{}' is missing from the weights; the download may be "
                "incomplete or the config.json belongs to another model",
                model_dir.string(), name);
  for (const auto& u : layout.units)
    for (const auto& p : u.params) file.check_weight(p.hf_name, p.shape);
  return file;
}

ModelWeights load_model_weights(const std::filesystem::path& model_dir) {
  ModelWeights w = deferred_model_weights(model_dir);
  w.load_all();
  return w;
}

ModelWeights deferred_model_weights(const std::filesystem::path& model_dir) {
  ModelWeights w;
  w.config = load_model_config(model_dir);
  w.layout = build_model_layout(w.config);
  auto file = std::make_shared<const SafetensorsModel>(open_model_weights(model_dir, w.config, w.layout));
  w.loader = [file, layout = w.layout](size_t unit, std::span<float> out) {
    FERRY_ASSERT(out.size() == static_cast<size_t>(layout.units[unit].numel));
    read_unit_weights(*file, layout.units[unit], out.data());
  };
  return w;
}

void ModelWeights::load_all() {
  if (!deferred()) return;
  units.resize(layout.units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    units[u].resize(static_cast<size_t>(layout.units[u].numel));
    loader(u, units[u]);
  }
  loader = nullptr;
}

void save_model_weights(const std::filesystem::path& dir, const ModelLayout& layout,
                        const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                        const UnitFetch& fetch, const UnitBytes& encoded) {
  FERRY_ASSERT(units.size() == layout.units.size());
  // Converted as written (TensorToWrite::f32_source): an 8B model saved in bf16 would otherwise
  // need 16 GB more host memory at the very end of a run whose plan used nearly all of it.
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < layout.units.size(); ++i) {
    const auto* bytes =
        units[i] == nullptr && encoded ? static_cast<const std::byte*>(encoded(i, dtype)) : nullptr;
    for (const auto& p : layout.units[i].params) {
      TensorToWrite t{p.hf_name, dtype, p.shape, nullptr};
      if (units[i] != nullptr) {
        t.f32_source = units[i] + p.offset;
      } else if (bytes != nullptr) {
        t.data = bytes + static_cast<size_t>(p.offset) * dtype_size(dtype);
      } else {
        FERRY_ASSERT(fetch, "a unit not in RAM needs a fetch");
        t.f32_pieces = [&fetch, i, offset = static_cast<size_t>(p.offset)](size_t at, size_t count) {
          return fetch(i, offset + at, count);
        };
      }
      tensors.push_back(std::move(t));
    }
  }
  write_safetensors_model(dir, tensors, max_shard_bytes);
}

}  // namespace ferry
