// What would keep the GPU busy when the chosen plan leaves it waiting for the CPU AdamW. With
// clipping, every host-updated unit is updated only once the whole step's global norm is known, and
// that pass has to hide under the next step's forward; when the forward is the shorter of the two
// (few tokens a step for the model's size), the GPU waits. Two settings change that, each a choice
// only the user can make, since each changes the training:
//   * more tokens a step (global_batch): the forward grows with the tokens, the CPU pass does not;
//   * no clipping (max_grad_norm: 0): each unit is updated as its gradient lands, during the
//     backward.
// Pure: a few more plan searches over the same model, profile and budgets.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/cost_model.h"
#include "planner/profile.h"
#include "planner/search.h"

namespace ferry {

struct IdleAdvice {
  std::string setting;    // "global_batch: 32", "max_grad_norm: 0"
  std::string effect;     // "65536 tokens a step"
  Prediction prediction;  // of the best plan with the setting changed
};

// The GPU idle a plan may have before advice is given.
constexpr double kIdleAdviceThreshold = 0.03;

// Empty unless `best` (the prediction of the plan chosen for `request`) idles the GPU more than
// `threshold` of its step while the CPU optimizer is on its critical path. Then, of: the smallest
// global_batch of 2x and 4x the requested one whose best plan idles at most `threshold`; and, with
// clipping on, the best plan without it, where that idles at most `threshold` or half of `best` --
// those settings, each with its prediction. A setting with which no plan fits the budgets is left out.
std::vector<IdleAdvice> idle_advice(const ModelConfig& config, const ModelLayout& layout,
                                    const MachineProfile& profile, const PlanRequest& request,
                                    const Prediction& best, double threshold = kIdleAdviceThreshold);

}  // namespace ferry
