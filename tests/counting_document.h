// A document of counting token ids whose every token is a target, for the tests that pack
// documents of chosen lengths and look at where they fall.
#pragma once

#include <cstdint>

#include "data/packing.h"

namespace ferry::test {

// n tokens with ids first_id, first_id + 1, ..., each its own label.
inline Document counting_document(int n, int first_id = 1) {
  Document d;
  for (int i = 0; i < n; ++i) d.input_ids.push_back(static_cast<int32_t>(first_id + i));
  d.labels = d.input_ids;
  return d;
}

}  // namespace ferry::test
