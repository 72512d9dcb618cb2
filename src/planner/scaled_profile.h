// A measured profile carried to another model shape by counting FLOPs: the machine's copy, host
// and optimizer rates as measured, and each compute time scaled by the ratio of the two shapes'
// FLOPs (planner/nominal_profile.h counts them). For planning shapes no profile was measured for
// on a machine that has a profile of a similar shape (the examples' and docs' plans of Mistral,
// Qwen and larger Llama shapes from the lent H200's Llama-3.1-8B profile): the GEMMs' efficiency
// measured on one shape stands in for the other's, which is close for shapes of similar width and
// optimistic for much narrower ones. A profile measured for the shape itself is always better;
// what a scaled profile is says its device_name, which `ferry plan` prints.
//
// Worked example (s2048): Llama-3.1-8B's layer forward is 453 MFLOP per token (2 x 218 M in the
// projections + 2 x 2048 x 4096 in attention); Qwen3-32B's is 2 x 488 M + 2 x 2048 x 8192 = 1009
// MFLOP, so its per-token layer times are the 8B's measured ones x 2.23. Fixed costs (launches) do
// not depend on the shape and are kept; rates per parameter (AdamW, the norm pass) too.
#pragma once

#include <string>

#include "model/model_config.h"
#include "planner/profile.h"

namespace ferry {

// `measured` was measured for `measured_shape` (its shape_key says so: checked, ferry::Error
// otherwise); returns it for `target`, at the measured profile's seq_len and weight dtype.
// `measured_name` names the measured shape in the result's device_name ("llama/llama-3.1-8b").
MachineProfile scale_profile(const MachineProfile& measured, const ModelConfig& measured_shape,
                             const ModelConfig& target, const std::string& measured_name);

}  // namespace ferry
