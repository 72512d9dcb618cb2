// A build without CUDA: the GPU AdamW fails loudly where it is asked for.
#include "core/error.h"
#include "optim/gpu_adamw.h"

namespace ferry {

struct GpuAdamW::State {};

GpuAdamW::GpuAdamW(void* /*stream*/) {
  fail("optim",
       "this ferry was built without CUDA; the GPU AdamW needs a build with the CUDA toolkit (nvcc)");
}

GpuAdamW::~GpuAdamW() = default;

void GpuAdamW::step(const AdamWUnitBuffers&, std::span<const AdamWSegment>, const AdamWHyper&, int64_t,
                    const float*) {
  fail("optim", "this ferry was built without CUDA");
}

void GpuAdamW::add_grad_sumsq(const void*, DType, size_t, double*) {
  fail("optim", "this ferry was built without CUDA");
}

void GpuAdamW::grad_sumsq_partials(const void*, DType, size_t, double*) {
  fail("optim", "this ferry was built without CUDA");
}

void GpuAdamW::accumulate(const double*, size_t, double*) {
  fail("optim", "this ferry was built without CUDA");
}

void GpuAdamW::clip_coefficient(const double*, double, float*) {
  fail("optim", "this ferry was built without CUDA");
}

void GpuAdamW::write_weights(const float*, void*, DType, size_t) {
  fail("optim", "this ferry was built without CUDA");
}

}  // namespace ferry
