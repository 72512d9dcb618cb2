// What `ferry profile` prints: a machine profile's rates, with what they mean for the model's shape.
#pragma once

#include "model/model_config.h"
#include "planner/profile.h"

namespace ferry {

// Prints the profile to stdout.
void print_profile(const MachineProfile& p, const ModelConfig& model);

}  // namespace ferry
