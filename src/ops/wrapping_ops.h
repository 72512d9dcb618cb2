// An Ops over another backend's Ops that adds something to its compute calls (QueuedOps runs them
// as tasks on a device stream, TracingOps stamps them on a step's timeline) and passes through,
// unchanged, what describes and configures that backend: its name, its GEMM tuning and choices,
// its attention choice. A wrapper that left one of those to Ops's default would run another
// backend than the one it wraps (a traced step on the library's attention where the profile took
// ferry's own, a queued one tuning GEMMs it had been given), so each is passed on here once, for
// every wrapper.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace ferry {

class WrappingOps : public Ops {
 public:
  const char* name() const override { return inner_->name(); }
  int calls_to_steady_speed() const override { return inner_->calls_to_steady_speed(); }
  int64_t tuning_calls() const override { return inner_->tuning_calls(); }
  std::string kernels() const override { return inner_->kernels(); }
  std::string gemm_choice_scope() const override { return inner_->gemm_choice_scope(); }
  std::vector<GemmChoice> gemm_choices() const override { return inner_->gemm_choices(); }
  void adopt_gemm_choices(const std::vector<GemmChoice>& choices) override {
    inner_->adopt_gemm_choices(choices);
  }
  bool has_library_attention() const override { return inner_->has_library_attention(); }
  void use_library_attention(bool forward, bool backward) override {
    inner_->use_library_attention(forward, backward);
  }

 protected:
  explicit WrappingOps(std::shared_ptr<Ops> inner) : inner_(std::move(inner)) {}

  // Shared: a queued call's task keeps the ops it runs on alive past the wrapper.
  std::shared_ptr<Ops> inner_;
};

}  // namespace ferry
