// The predicted time of an evaluation (eval_steps with val_split or eval_data): the held-out rows
// go through the run's own plan forward only (SlidingEngine::evaluate), in batches of the step's
// shape. Pure function of the plan, the model's shape and the profile, as the step's prediction
// (planner/cost_model.h) is, and replayed the same way: a task graph through the stream simulator.
//
// What a batch runs, as the engine runs it: the tokens up; then E, L0 .. L(n-1), H in order, each
// streamed unit uploaded into its slot as the step's slot schedule (planner/slot_schedule.h) puts
// it there, up to gpu_slots - 1 uses ahead, and each resident unit's weights uploaded once before
// its use (an evaluation starts a step's bookkeeping afresh; units with their optimizer on the GPU
// keep theirs); each unit's forward over every micro-chunk; the loss read back. No backward, no
// gradients, no CPU AdamW, no activation offloads (nothing is kept for a backward).
//
// The head's profiled time is its fused forward and backward: the LM-head GEMM forward and its two
// gradient GEMMs. Without gradients only the forward GEMM and the loss remain: a third of its time
// per token (2HV of 6HV FLOPs), its fixed (launch) part whole.
//
// Worked example (Llama-3.1-8B on the H200 profile, 24 GiB, 8 x 2048 tokens a batch, every layer
// streamed): 32 layers x 8 chunks x ~2.1 ms forward ≈ 0.54 s of compute against 32 x 436 MB of
// uploads at ~50 GB/s ≈ 0.28 s, hidden under it: ~0.6 s a batch, about a third of the step.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/step_program.h"

namespace ferry {

struct EvalPrediction {
  int64_t batch_tokens = 0;    // tokens a batch holds (the step's shape)
  double batch_seconds = 0.0;  // one batch, forward only
  // `tokens` evaluation tokens: whole batches (a last partial one is padded to full micro-chunks,
  // and a batch's weight traffic does not shrink with its rows, so it is counted whole).
  double seconds_for(int64_t tokens) const;
};

EvalPrediction predict_evaluation(const ModelConfig& config, const ModelLayout& layout, const Plan& plan,
                                  const MachineProfile& profile, const StepShape& shape);

}  // namespace ferry
