// A model's weights held whole in the memory the ops run on, for generation: fp32 for the CPU
// backend, bf16 on a GPU. Unlike training's sliding window, nothing moves after loading; a GPU
// that cannot hold the weights (with the KV cache) is refused before anything is uploaded.
#pragma once

#include <filesystem>
#include <functional>
#include <vector>

#include "device/device.h"
#include "model/model_config.h"
#include "model/unit_layout.h"
#include "model/unit_params.h"

namespace ferry {

class ResidentModel {
 public:
  // Fills unit u's fp32 values (layout.units[u].numel floats) into dst.
  using UnitReader = std::function<void(size_t unit, float* dst)>;

  // Uploads every unit, read one at a time (host memory holds one unit's fp32 copy, not the model's).
  ResidentModel(Device& device, const ModelConfig& config, DType dtype, const UnitReader& read_unit);

  // Reads DIR's safetensors (any float dtype), checked in full before anything is uploaded.
  static ResidentModel load(Device& device, const std::filesystem::path& model_dir, DType dtype);

  const ModelConfig& config() const { return config_; }
  const ModelLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  Tensor embedding() const;
  LayerParams layer(int64_t index) const;
  HeadParams head() const;

 private:
  ModelConfig config_;
  ModelLayout layout_;
  DType dtype_;
  std::vector<DeviceBuffer> units_;
};

// Bytes the weights of `layout` take in `dtype`.
size_t resident_weight_bytes(const ModelLayout& layout, DType dtype);

}  // namespace ferry
