#include "profiler/lean_adamw_probe.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/dtype.h"

namespace ferry {

LeanAdamWProbe::LeanAdamWProbe(OptimizerStateFormat format, size_t params, ThreadPool& pool)
    : n_(params), pool_(pool), staging_(std::make_unique_for_overwrite<uint16_t[]>(params)) {
  std::vector<void*> bases;
  for (const StateArraySpec& a : state_arrays(format)) {
    arrays_.emplace_back(host_array_floats(state_array_bytes(a.kind, n_)), "profile lean adamw state");
    bases.push_back(arrays_.back().data());
  }
  state_ = lean_unit_view(format, n_, bases, 1);
  // Masters and gradients of ordinary sizes, from one period of 256 values (cheap to write).
  float masters[256];
  uint16_t grads[256];
  for (size_t j = 0; j < 256; ++j) {
    masters[j] = 0.02f * std::sin(0.37f * static_cast<float>(j));
    grads[j] = f32_to_bf16(1e-3f * std::cos(0.11f * static_cast<float>(j)));
  }
  pool.parallel_for(
      n_,
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; i += 256) {
          const size_t count = std::min<size_t>(256, end - i);
          lean_write_masters(state_, masters, i, i + count);
          std::copy(grads, grads + count, staging_.get() + i);
        }
      },
      size_t{1} << 16);
  // Moments of ordinary size: a few steps from zero (the HostArrays come zero-filled).
  for (int k = 0; k < 3; ++k) pass();
}

void LeanAdamWProbe::pass() {
  const AdamWSegment all{0, n_, true};
  AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  lean_adamw_step(state_, std::span<const AdamWSegment>(&all, 1), staging_.get(), DType::BF16, staging_.get(),
                  hyper, ++step_, 1.0f, pool_);
}

}  // namespace ferry
