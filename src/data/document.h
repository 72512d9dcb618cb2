// A document: one training sequence of token ids with its per-token labels, before packing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ignore_index.h"

namespace ferry {

struct Document {
  std::vector<int32_t> input_ids;  // (tokens)
  // (tokens) labels[t] is the token the model should produce at position t-1, i.e. normally
  // input_ids[t]; kIgnoreIndex masks it (a prompt token, say). Same length as input_ids.
  std::vector<int32_t> labels;
};

}  // namespace ferry
