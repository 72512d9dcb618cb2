// The optimizer state of one unit as the byte arrays it is stored in, for whatever moves or
// counts it without reading it (the disk tier pages them in and out, the memory model counts
// them). One place says what the arrays are, so that a state format with other arrays (bf16
// masters, 8-bit moments) changes this function and not the code that moves the bytes.
#pragma once

#include <cstddef>
#include <vector>

namespace ferry {

// The sizes in bytes of a unit's state arrays, in the order HostUnitState holds them: fp32
// master, AdamW m, AdamW v (4 bytes/param each).
inline std::vector<size_t> unit_state_array_bytes(size_t numel) {
  return {numel * sizeof(float), numel * sizeof(float), numel * sizeof(float)};
}

// Bytes per parameter of the optimizer state (the sum of the arrays per element).
inline size_t state_bytes_per_param() {
  size_t total = 0;
  for (size_t b : unit_state_array_bytes(1)) total += b;
  return total;
}

}  // namespace ferry
