#include "tiny_model.h"

#include "train/model_init.h"

namespace ferry::faults {

std::string tiny_config_json() {
  return model_config_to_json(preset_config("llama", "tiny")).dump(2);
}

void write_tiny_model(const std::filesystem::path& dir) {
  write_random_model(preset_config("llama", "tiny"), 7, dir);
}

}  // namespace ferry::faults
