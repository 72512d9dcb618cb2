#include "generate/resident_model.h"

#include "io/safetensors.h"
#include "model/model_weights.h"

namespace ferry {

size_t resident_weight_bytes(const ModelLayout& layout, DType dtype) {
  size_t bytes = 0;
  for (const auto& u : layout.units) bytes += static_cast<size_t>(u.numel) * dtype_size(dtype);
  return bytes;
}

ResidentModel::ResidentModel(Device& device, const ModelConfig& config, DType dtype,
                             const UnitReader& read_unit)
    : config_(config), layout_(build_model_layout(config)), dtype_(dtype) {
  int64_t largest = 0;
  for (const auto& u : layout_.units) largest = std::max(largest, u.numel);
  std::vector<float> values(static_cast<size_t>(largest));
  std::vector<unsigned char> converted(
      dtype == DType::F32 ? 0 : static_cast<size_t>(largest) * dtype_size(dtype));
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const size_t count = static_cast<size_t>(layout_.units[u].numel);
    read_unit(u, values.data());
    const void* source = values.data();
    if (dtype != DType::F32) {
      convert_from_f32(values.data(), dtype, converted.data(), count);
      source = converted.data();
    }
    units_.emplace_back(device, count * dtype_size(dtype), "generation weights");
    // A pageable source: the copy is done when synchronize returns, and the buffers are reused.
    device.copy_to_device(units_.back().data(), source, count * dtype_size(dtype), StreamKind::HostToDevice);
    device.synchronize_all();
  }
}

ResidentModel ResidentModel::load(Device& device, const std::filesystem::path& model_dir, DType dtype) {
  const ModelConfig config = load_model_config(model_dir);
  const ModelLayout layout = build_model_layout(config);
  const SafetensorsModel file = open_model_weights(model_dir, config, layout);
  return ResidentModel(device, config, dtype,
                       [&](size_t unit, float* dst) { read_unit_weights(file, layout.units[unit], dst); });
}

Tensor ResidentModel::embedding() const {
  return embedding_table(layout_, units_[layout_.embedding_unit()].data(), dtype_);
}

LayerParams ResidentModel::layer(int64_t index) const {
  const size_t u = layout_.layer_unit(index);
  return layer_params(layout_.units[u], units_[u].data(), dtype_);
}

HeadParams ResidentModel::head() const {
  return head_params(layout_, units_[layout_.head_unit()].data(), units_[layout_.embedding_unit()].data(),
                     dtype_);
}

}  // namespace ferry
