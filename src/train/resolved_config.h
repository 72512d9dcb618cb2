// The configuration a run actually used, every key with its value (defaults included), as YAML:
// written to <output_dir>/config.yaml so that a run can be read back, compared and repeated
// (`ferry train output_dir/config.yaml` trains the same way). Paths are as resolved (absolute where
// the config or the command line made them so); byte sizes are plain byte counts.
#pragma once

#include <string>

#include "train/train_config.h"

namespace ferry {

inline constexpr const char* kResolvedConfigFile = "config.yaml";

std::string resolved_config_yaml(const TrainConfig& config);

}  // namespace ferry
