// The optimizer state of one unit as the byte arrays it is stored in, for whatever moves or
// counts it without reading it (the disk tier pages them in and out, the memory model counts
// them). The arrays are those of the run's format (optim/state_format.h state_arrays): fp32's
// master, m and v, or a lean format's bf16 master, 8-bit moments and block scales. Code that moves
// the bytes asks here and never looks inside, so a format with other arrays changes nothing there.
#pragma once

#include <cstddef>
#include <vector>

#include "optim/state_format.h"

namespace ferry {

// The sizes in bytes of a unit's state arrays in `format`, in the order HostUnitState holds them
// (state_arrays(format)): for fp32, master, AdamW m, AdamW v (4 bytes/param each).
inline std::vector<size_t> unit_state_array_bytes(OptimizerStateFormat format, size_t numel) {
  std::vector<size_t> bytes;
  for (const StateArraySpec& spec : state_arrays(format))
    bytes.push_back(state_array_bytes(spec.kind, numel));
  return bytes;
}

}  // namespace ferry
