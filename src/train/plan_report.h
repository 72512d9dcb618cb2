// What `ferry plan` prints and plans with: the chosen plan per unit and per layer, its predicted
// memory against the budgets and its step time, what bounds it and the next best alternatives; the
// profile a plan uses (nominal, a file, or this machine's); a preset's shape by ARCH/NAME.
#pragma once

#include <string>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/profile.h"
#include "train/device_choice.h"
#include "train/plan_selection.h"
#include "train/train_config.h"

namespace ferry {

// Prints the selection to stdout.
void print_selection(const TrainConfig& config, const ModelConfig& model, const ModelLayout& layout,
                     const PlanTarget& target, const PlanSelection& s);

// The profile to plan with: --nominal's rates, `profile: FILE`, else this machine's (cached, or
// measured now on the config's device). `source` says which. With `scale`, a profile file measured
// for another shape is not refused but carried to this model's shape by FLOPs
// (planner/scaled_profile.h), when a preset has the shape it was measured for.
MachineProfile plan_profile(const TrainConfig& config, const ModelConfig& model, const DeviceChoice& choice,
                            bool nominal, std::string* source, bool scale = false);

// The preset ("llama/llama-3.1-8b") whose shape a profile's shape_key names; ferry::Error when none.
std::string preset_of_profile(const MachineProfile& profile, const std::string& source);

// "llama/llama-3.1-8b" -> that preset's config; ferry::Error for another form.
ModelConfig preset_model(const std::string& spec);

}  // namespace ferry
