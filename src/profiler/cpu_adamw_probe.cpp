#include "profiler/cpu_adamw_probe.h"

#include <algorithm>
#include <span>

#include "core/dtype.h"
#include "optim/cpu_adamw.h"

namespace ferry {

CpuAdamWProbe::CpuAdamWProbe(size_t params, ThreadPool& pool)
    : n_(params),
      pool_(pool),
      master_(params, "profile adamw master"),
      m_(params, "profile adamw m"),
      v_(params, "profile adamw v"),
      staging_(std::make_unique_for_overwrite<uint16_t[]>(params)) {
  // Ordinary numbers (no denormals); the pass has no data-dependent branch, so equal values time
  // the same as varied ones.
  pool.parallel_for(
      n_,
      [&](size_t begin, size_t end) {
        std::fill(master_.data() + begin, master_.data() + end, 0.02f);
        std::fill(m_.data() + begin, m_.data() + end, 1e-4f);
        std::fill(v_.data() + begin, v_.data() + end, 1e-8f);
        std::fill(staging_.get() + begin, staging_.get() + end, f32_to_bf16(1e-3f));
      },
      size_t{1} << 16);
}

void CpuAdamWProbe::pass() {
  AdamWUnitBuffers b;
  b.master = master_.data();
  b.m = m_.data();
  b.v = v_.data();
  b.grad = staging_.get();
  b.grad_dtype = DType::BF16;
  b.bf16_out = staging_.get();
  const AdamWSegment all{0, n_, true};
  AdamWHyper hyper;
  hyper.lr = 1e-5;
  hyper.weight_decay = 0.01;
  cpu_adamw_step(b, std::span<const AdamWSegment>(&all, 1), hyper, ++step_, 1.0f, pool_);
}

}  // namespace ferry
