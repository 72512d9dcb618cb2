// GpuAdamW's host side: checks, the scalars of a step, and the partial-sum buffer; the kernels are
// in gpu_adamw_kernels.cu.
#include "optim/gpu_adamw.h"

#include "core/error.h"
#include "optim/adamw_scalars.h"
#include "optim/clip.h"
#include "optim/cuda/gpu_adamw_kernels.h"

namespace ferry {

static_assert(gpu_adamw::kSumsqChunk == kGradNormChunk,
              "the GPU's norm partials must cut the chunks clip.cpp cuts");
static_assert(gpu_adamw::kSumsqColumns == kGradNormColumns,
              "the GPU's norm partials must sum in clip.cpp's order");

struct GpuAdamW::State {
  void* stream = nullptr;
  void* partials = nullptr;  // grow-only, stream-ordered
  size_t partials_count = 0;

  ~State() { gpu_adamw::stream_free(partials, stream); }

  double* partials_for(size_t count) {
    if (count > partials_count) {
      gpu_adamw::stream_free(partials, stream);
      partials = nullptr;
      partials_count = 0;
      partials = gpu_adamw::stream_alloc(count * sizeof(double), stream);
      partials_count = count;
    }
    return static_cast<double*>(partials);
  }
};

GpuAdamW::GpuAdamW(void* stream) : state_(std::make_unique<State>()) {
  state_->stream = stream;
}

GpuAdamW::~GpuAdamW() = default;

void GpuAdamW::step(const AdamWUnitBuffers& unit, std::span<const AdamWSegment> segments,
                    const AdamWHyper& hyper, int64_t step, const float* grad_scale) {
  if (check_adamw_unit(unit, segments, step) == 0) return;
  const AdamWScalars s = adamw_scalars(hyper, step);

  const bool bf16 = unit.grad_dtype == DType::BF16;
  const size_t grad_size = bf16 ? 2 : 4;
  for (const AdamWSegment& seg : segments) {
    if (seg.count == 0) continue;
    gpu_adamw::UpdateArgs a;
    a.master = unit.master + seg.offset;
    a.m = unit.m + seg.offset;
    a.v = unit.v + seg.offset;
    a.grad = static_cast<const unsigned char*>(unit.grad) + seg.offset * grad_size;
    a.grad_bf16 = bf16;
    a.bf16_out = unit.bf16_out == nullptr ? nullptr : unit.bf16_out + seg.offset;
    a.count = seg.count;
    a.decay_factor = seg.decay ? s.decay_factor : 1.0f;
    a.grad_scale = grad_scale;
    gpu_adamw::launch_update(a, s, state_->stream);
  }
}

void GpuAdamW::add_grad_sumsq(const void* grad, DType grad_dtype, size_t n, double* sum_of_squares) {
  FERRY_ASSERT(grad_dtype == DType::F32 || grad_dtype == DType::BF16, "gradients are F32 or BF16");
  if (n == 0) return;
  FERRY_ASSERT(grad != nullptr && sum_of_squares != nullptr);
  const size_t chunks = (n + gpu_adamw::kSumsqChunk - 1) / gpu_adamw::kSumsqChunk;
  double* partials = state_->partials_for(chunks);
  gpu_adamw::launch_sumsq_partials(grad, grad_dtype == DType::BF16, n, partials, state_->stream);
  gpu_adamw::launch_accumulate(partials, chunks, sum_of_squares, state_->stream);
}

void GpuAdamW::grad_sumsq_partials(const void* grad, DType grad_dtype, size_t n, double* partials) {
  FERRY_ASSERT(grad_dtype == DType::F32 || grad_dtype == DType::BF16, "gradients are F32 or BF16");
  if (n == 0) return;
  FERRY_ASSERT(grad != nullptr && partials != nullptr);
  gpu_adamw::launch_sumsq_partials(grad, grad_dtype == DType::BF16, n, partials, state_->stream);
}

void GpuAdamW::accumulate(const double* partials, size_t count, double* sum) {
  FERRY_ASSERT(sum != nullptr && (count == 0 || partials != nullptr));
  gpu_adamw::launch_accumulate(partials, count, sum, state_->stream);
}

void GpuAdamW::write_weights(const float* master, void* weights, DType dtype, size_t n) {
  FERRY_CHECK(dtype == DType::BF16 || dtype == DType::F32, "optim",
              "the GPU writes weights in bf16 or fp32, not {}", dtype_name(dtype));
  if (dtype == DType::BF16)
    gpu_adamw::launch_to_bf16(master, static_cast<uint16_t*>(weights), n, state_->stream);
  else
    gpu_adamw::launch_copy_f32(master, static_cast<float*>(weights), n, state_->stream);
}

void GpuAdamW::clip_coefficient(const double* sum_of_squares, double max_norm, float* coefficient) {
  FERRY_ASSERT(sum_of_squares != nullptr && coefficient != nullptr);
  gpu_adamw::launch_clip_coefficient(sum_of_squares, max_norm > 0.0, static_cast<float>(max_norm),
                                     static_cast<float>(1e-6), coefficient, state_->stream);
}

}  // namespace ferry
