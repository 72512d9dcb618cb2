// Attention in groups of KV heads in the planner (model/decoder_layer.h, Plan::head_groups): which
// group counts the search tries, and what they cost beside one group.
//
// Memory needs no function here: the memory model carves the layer scratch for the plan's groups
// (q, k, v and their gradients one group's heads) and sizes the CUDA attention workspace for one
// group's query heads (memory_model.cpp), exactly as the engine and the ops allocate them.
//
// Time: the attention kernels do the same work in G calls of 1/G of the heads (at long sequences
// each call still has thousands of thread blocks), and the projections the same FLOPs in G GEMMs
// of 1/G of the rows; what G adds is the backward's second pass over the q/k/v projections of
// every group but the last (the backward runs the last group first from the recompute's q, k, v,
// and computes the others' again before their attention backward).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace ferry {

// 1, and the divisors 2, 4 and 8 of the model's KV heads.
std::vector<int64_t> head_group_counts(const ModelConfig& config);
// The group counts the search tries for sequences of `seq_len`: 1, and for sequences longer than
// kTiledFromSeqLen (planner/sequence_tile.h) the divisors 2, 4 and 8 of the KV heads. Below that
// attention's tensors are a small share of a layer's scratch (8K tokens of an 8B model: 64 MiB
// for q), and groups would only cost the backward's projections.
std::vector<int64_t> head_group_candidates(const ModelConfig& config, int64_t seq_len);

// Of a layer forward's time, the share a backward in `head_groups` groups runs again: the q/k/v
// projections of G - 1 of G groups, as their share of the layer's weight-matrix FLOPs. Llama-3.1-8B
// at G = 4: 3/4 x 4096 x (4096 + 2 x 1024) of 4096 x (2 x 4096 + 2 x 1024) + 3 x 4096 x 14336,
// 8.6%. 0 at G = 1.
double head_groups_backward_extra_share(const ModelConfig& config, int64_t head_groups);

}  // namespace ferry
