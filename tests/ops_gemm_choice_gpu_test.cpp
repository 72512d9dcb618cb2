// GEMM choices handed from one CudaOps to another (ops/gemm_choice.h): the second runs a product
// on the first's tuned algorithm from its first call, without trials, and computes the same bits;
// a choice whose configuration cuBLASLt no longer lists at its place is not taken (the problem is
// tuned again).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/ops.h"

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#include "ops_cuda_test_util.h"
#endif

namespace ferry {
namespace {

#if !FERRY_HAVE_CUDA

TEST(GemmChoiceHandover, NeedsCudaBuild) {
  GTEST_SKIP() << "built without CUDA";
}

#else

using cudatest::DeviceTensor;

// A product large enough that cuBLASLt offers several candidates: y (T, out) = x (T, in) w^T.
constexpr int64_t kT = 2048, kIn = 4096, kOut = 4096;

class GemmChoiceHandover : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cudatest::gpu_available(&why)) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    x_ = std::make_unique<DeviceTensor>(DType::BF16, std::vector<int64_t>{kT, kIn});
    w_ = std::make_unique<DeviceTensor>(DType::BF16, std::vector<int64_t>{kOut, kIn});
    y_ = std::make_unique<DeviceTensor>(DType::BF16, std::vector<int64_t>{kT, kOut});
    x_->upload(cudatest::uniform(static_cast<size_t>(kT * kIn), 1));
    w_->upload(cudatest::uniform(static_cast<size_t>(kOut * kIn), 2, -0.02f, 0.02f));
  }
  void TearDown() override {
    x_.reset(), w_.reset(), y_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }
  // One forward product on `ops`, waited for.
  void product(Ops& ops) {
    ops.linear_forward(x_->view(), w_->view(), Tensor(), Tensor(), y_->view());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
  // Calls the product until its tuning has settled (at most calls_to_steady_speed() + 1 calls).
  void tune(Ops& ops) {
    for (int i = 0; i <= ops.calls_to_steady_speed() && ops.gemm_choices().empty(); ++i) product(ops);
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceTensor> x_, w_, y_;
};

TEST_F(GemmChoiceHandover, AdoptedChoiceRunsFromTheFirstCallWithTheSameBits) {
  CudaOps first(stream_);
  ASSERT_FALSE(first.gemm_choice_scope().empty()) << "tuning is on by default";
  EXPECT_NE(first.gemm_choice_scope().find("cuBLASLt"), std::string::npos) << first.gemm_choice_scope();
  tune(first);
  const std::vector<GemmChoice> choices = first.gemm_choices();
  ASSERT_EQ(choices.size(), 1u) << "one problem, settled";
  EXPECT_LT(choices[0].candidate, static_cast<size_t>(kGemmTuneAlgos));
  EXPECT_NE(choices[0].config.find("tile"), std::string::npos) << choices[0].config;
  product(first);  // on the chosen algorithm
  const std::vector<unsigned char> chosen_bits = y_->download_raw();

  CudaOps second(stream_);
  EXPECT_EQ(second.gemm_choice_scope(), first.gemm_choice_scope()) << "one GPU, one library, same settings";
  second.adopt_gemm_choices(choices);
  product(second);
  EXPECT_EQ(second.tuning_calls(), 0) << "no trials: the choice is taken on the first call";
  EXPECT_EQ(second.gemm_choices(), choices) << "an adopted choice is settled, to be kept again";
  EXPECT_EQ(y_->download_raw(), chosen_bits) << "the same algorithm computes the same bits";
}

TEST_F(GemmChoiceHandover, ChoiceOfAnotherConfigurationIsTunedAgain) {
  CudaOps first(stream_);
  tune(first);
  std::vector<GemmChoice> choices = first.gemm_choices();
  ASSERT_EQ(choices.size(), 1u);
  choices[0].config = "algo 0 tile 0 of a library before";
  CudaOps second(stream_);
  second.adopt_gemm_choices(choices);
  product(second);
  EXPECT_GT(second.tuning_calls(), 0) << "the stale choice is not taken: the product is on trial";
  EXPECT_TRUE(second.gemm_choices().empty()) << "nothing settled before its trials end";
  tune(second);
  ASSERT_EQ(second.gemm_choices().size(), 1u);
  EXPECT_EQ(second.gemm_choices()[0].problem, choices[0].problem);
}

TEST_F(GemmChoiceHandover, NoScopeWithoutTuning) {
  CudaOpsOptions options;
  options.gemm_tuning = false;
  CudaOps untuned(stream_, options);
  EXPECT_EQ(untuned.gemm_choice_scope(), "");
  product(untuned);
  EXPECT_TRUE(untuned.gemm_choices().empty());
}

#endif

}  // namespace
}  // namespace ferry
