// Ops::attention_cached on the GPU (ops/cuda/attention_cached.cu) against the CPU reference: the
// newest T queries of a sequence over its S cached keys and values, at awkward sizes (one query
// over one key; caches not a multiple of the kernel's 8 warps; GQA and plain heads; head dims 16
// to 256), with the CPU given the same bf16-rounded inputs.
//
// Tolerance: each output is a convex combination of values, computed in fp32 and rounded once to
// bf16, so it is off by at most u |out| plus the fp32 error of the softmax and sums, far below
// u max|v|; bound = 4 u max|v| (as CudaParity.AttentionThroughOps), and the relative RMS error must
// stay below u (a wrong mask or scale moves it by far more).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "ops/ops.h"

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#include "ops_cuda_test_util.h"
#endif

namespace ferry {
namespace {

#if !FERRY_HAVE_CUDA

TEST(AttentionCachedGpu, NeedsCudaBuild) {
  GTEST_SKIP() << "built without CUDA";
}

#else

using cudatest::bounds;
using cudatest::DeviceTensor;
using cudatest::kBf16U;
using cudatest::round_bf16;
using cudatest::uniform;
using cudatest::Vec;
using cudatest::within;

struct Case {
  int64_t T, S, Hq, Hkv, D;
};

TEST(AttentionCachedGpu, MatchesTheCpuReference) {
  std::string why;
  if (!cudatest::gpu_available(&why)) GTEST_SKIP() << why;
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  auto gpu = std::make_unique<CudaOps>(stream);
  auto cpu = make_cpu_ops();
  const Case cases[] = {{1, 1, 4, 2, 64},    {1, 37, 4, 2, 64},   {5, 33, 4, 2, 64},
                        {7, 300, 8, 2, 128}, {1, 129, 8, 8, 128}, {3, 31, 4, 4, 32},
                        {2, 17, 2, 1, 256},  {1, 1000, 4, 2, 16}, {33, 33, 4, 2, 80}};
  uint32_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) + " Hq=" + std::to_string(c.Hq) +
                 " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    // Scores of a few units, so the softmax is neither flat nor one-hot.
    Vec q = uniform(c.T * c.Hq * c.D, seed++, -2.0f, 2.0f),
        k = uniform(c.S * c.Hkv * c.D, seed++, -2.0f, 2.0f);
    Vec v = uniform(c.S * c.Hkv * c.D, seed++);
    round_bf16(q), round_bf16(k), round_bf16(v);
    Vec ref(q.size());
    cpu->attention_cached(Tensor::f32(q.data(), {c.T, c.Hq, c.D}), Tensor::f32(k.data(), {c.S, c.Hkv, c.D}),
                          Tensor::f32(v.data(), {c.S, c.Hkv, c.D}), scale,
                          Tensor::f32(ref.data(), {c.T, c.Hq, c.D}));
    DeviceTensor gq(DType::BF16, {c.T, c.Hq, c.D}), gk(DType::BF16, {c.S, c.Hkv, c.D});
    DeviceTensor gv(DType::BF16, {c.S, c.Hkv, c.D}), gout(DType::BF16, {c.T, c.Hq, c.D});
    ASSERT_TRUE(gq.ok() && gk.ok() && gv.ok() && gout.ok());
    gq.upload(q), gk.upload(k), gv.upload(v);
    gpu->attention_cached(gq.view(), gk.view(), gv.view(), scale, gout.view());
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(within("out", gout.download(), ref, bounds(ref, 0.0, {}, 4 * kBf16U), kBf16U));
    EXPECT_TRUE(gout.guards());
  }
  gpu.reset();
  cudaStreamDestroy(stream);
}

#endif

}  // namespace
}  // namespace ferry
