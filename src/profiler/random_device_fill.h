// Random contents of device buffers, for measurements without a model file (the machine profile).
//
// Timing needs ordinary numbers, not trained ones: fresh device memory may hold NaN (the simulated
// device poisons it on purpose) and denormals would slow the CPU reference's arithmetic. Values are
// a hash of (seed, element index), so filling in parallel and in windows gives the same contents.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "device/device.h"
#include "model/unit_layout.h"

namespace ferry {

class RandomDeviceFill {
 public:
  // Values pass through a pinned staging buffer of at most `staging_bytes` (whole windows, each
  // copy waited for before the window is refilled).
  RandomDeviceFill(Device& device, uint64_t seed, size_t staging_bytes = size_t{16} << 20);

  // `count` elements of `dtype` (F32, BF16 or F16) at device memory `dst`, uniform with standard
  // deviation `std_dev` and mean 0.
  void values(void* dst, DType dtype, size_t count, float std_dev);
  // A unit's parameters in kind as transformers initialises them: norm weights 1, biases 0, the
  // others random with `std_dev`, padding between parameters 0.
  void unit(void* dst, DType dtype, const UnitLayout& unit, float std_dev);
  // `count` int32 values uniform in [0, bound) at device memory `dst`.
  void indices(int32_t* dst, size_t count, int32_t bound);

 private:
  enum class Kind { Zero, One, Random };
  struct Run {
    size_t offset, count;
    Kind kind;
  };
  void fill(void* dst, DType dtype, size_t count, const Run* runs, size_t run_count, float std_dev);

  Device& device_;
  uint64_t seed_;
  PinnedBuffer staging_;
};

}  // namespace ferry
