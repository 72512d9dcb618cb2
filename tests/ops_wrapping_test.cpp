// The ops that wrap a backend's ops (QueuedOps, TracingOps) run that backend as it is configured:
// what the machine profile and the GEMM cache set on the ops the run holds (the attention choice,
// the tuned GEMMs) reaches the backend underneath, and what the profile reads of the ops (its name,
// its kernels, its tuning) is the backend's.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "device/device.h"
#include "device/trace/tracer.h"
#include "ops/queued_ops.h"
#include "ops/tracing_ops.h"
#include "test_util.h"

namespace ferry {
namespace {

// A backend whose configuration differs from Ops's defaults in every respect and records what it
// is told; its compute ops are not called here.
class ConfiguredOps final : public Ops {
 public:
  const char* name() const override { return "configured"; }
  int calls_to_steady_speed() const override { return 31; }
  int64_t tuning_calls() const override { return 7; }
  std::string kernels() const override { return "configured, library attention"; }
  std::string gemm_choice_scope() const override { return "gpu 90, library 1"; }
  std::vector<GemmChoice> gemm_choices() const override { return adopted; }
  void adopt_gemm_choices(const std::vector<GemmChoice>& choices) override { adopted = choices; }
  bool has_library_attention() const override { return true; }
  void use_library_attention(bool forward, bool backward) override {
    library_forward = forward;
    library_backward = backward;
  }

  std::vector<GemmChoice> adopted;
  bool library_forward = true, library_backward = true;

  void embedding_forward(const int32_t*, Tensor, Tensor) override { not_here(); }
  void embedding_backward(const int32_t*, Tensor, Tensor) override { not_here(); }
  void rmsnorm_forward(Tensor, Tensor, float, Tensor, Tensor) override { not_here(); }
  void rmsnorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override { not_here(); }
  void rope(Tensor, const int32_t*, const float*, bool) override { not_here(); }
  void attention_forward(Tensor, Tensor, Tensor, AttentionMask, float, Tensor, Tensor) override {
    not_here();
  }
  void attention_backward(Tensor, Tensor, Tensor, AttentionMask, float, Tensor, Tensor, Tensor, Tensor,
                          Tensor, Tensor) override {
    not_here();
  }
  void attention_cached(Tensor, Tensor, Tensor, float, Tensor) override { not_here(); }
  void swiglu_forward(Tensor, Tensor, Tensor) override { not_here(); }
  void swiglu_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override { not_here(); }
  void linear_forward(Tensor, Tensor, Tensor, Tensor, Tensor) override { not_here(); }
  void linear_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, bool) override { not_here(); }
  void linear_cross_entropy(Tensor, Tensor, const int32_t*, float, Tensor, Tensor, Tensor, Tensor,
                            int64_t) override {
    not_here();
  }
  void add(Tensor, Tensor, Tensor) override { not_here(); }
  void zero(Tensor) override { not_here(); }
  void copy(Tensor, Tensor) override { not_here(); }

 private:
  static void not_here() { ADD_FAILURE() << "a compute op was called"; }
};

// What a run reads of `ops` and sets on it, checked against the backend `inner` underneath.
void expect_the_backend_configured_through(Ops& ops, const ConfiguredOps& inner) {
  EXPECT_EQ(ops.calls_to_steady_speed(), 31);
  EXPECT_EQ(ops.tuning_calls(), 7);
  EXPECT_EQ(ops.kernels(), "configured, library attention");
  EXPECT_EQ(ops.gemm_choice_scope(), "gpu 90, library 1");
  EXPECT_TRUE(ops.has_library_attention());

  const std::vector<GemmChoice> choices = {{"m=8192 n=4096 k=4096 bf16", 3, "tile 128x256"},
                                           {"m=8192 n=1024 k=4096 bf16", 0, "tile 64x128"}};
  ops.adopt_gemm_choices(choices);
  EXPECT_EQ(inner.adopted, choices);
  EXPECT_EQ(ops.gemm_choices(), choices);

  ops.use_library_attention(false, true);
  EXPECT_FALSE(inner.library_forward);
  EXPECT_TRUE(inner.library_backward);
  ops.use_library_attention(true, false);
  EXPECT_TRUE(inner.library_forward);
  EXPECT_FALSE(inner.library_backward);
}

TEST(WrappingOps, QueuedOpsConfigureTheBackendTheyRunOn) {
  auto device = make_sim_device(SimDeviceOptions{});
  auto inner = std::make_unique<ConfiguredOps>();
  const ConfiguredOps& backend = *inner;
  QueuedOps ops(*device, std::move(inner));
  EXPECT_EQ(std::string(ops.name()), "queued configured");
  expect_the_backend_configured_through(ops, backend);
}

TEST(WrappingOps, TracingOpsConfigureTheBackendTheyRunOn) {
  auto device = make_sim_device(SimDeviceOptions{});
  const test::ScratchDir dir("ops_wrapping");
  const LogLevel saved = log_level();
  set_log_level(LogLevel::Error);  // the tracer says it wrote nothing: no step was traced
  {
    Tracer tracer(*device, dir / "trace.json", {1});
    auto inner = std::make_unique<ConfiguredOps>();
    const ConfiguredOps& backend = *inner;
    TracingOps ops(std::move(inner), tracer);
    EXPECT_EQ(std::string(ops.name()), "configured");
    expect_the_backend_configured_through(ops, backend);
  }
  set_log_level(saved);
}

}  // namespace
}  // namespace ferry
