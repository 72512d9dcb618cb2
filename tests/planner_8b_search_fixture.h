// The plan search on the 8B shape and synthetic machines, shared by the planner's tests that reason
// about its choices: 8 sequences of 8192 tokens a step (64k tokens), 60 ms per layer forward for the
// step's tokens (the backward twice that: 5.9 s of compute), a 100 G params/s GPU AdamW, a 400 GiB
// host budget, and micro-chunks of one sequence.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "model/unit_layout.h"
#include "planner/search.h"
#include "planner_shapes.h"

namespace ferry::test {

inline constexpr size_t kGiB = size_t{1} << 30;

class Llama8BSearchTest : public ::testing::Test {
 protected:
  static constexpr int64_t kSeq = 8192, kGlobal = 8;
  const ModelConfig config_ = llama_8b();
  const ModelLayout layout_ = build_model_layout(config_);

  // PCIe `pcie` bytes/s each way, CPU AdamW `cpu` params/s.
  MachineProfile machine(double pcie, double cpu) const {
    return round_profile(config_, kSeq, kSeq * kGlobal, 0.06, pcie, cpu, 100e9);
  }
  PlanRequest request(size_t device_gib) const {
    PlanRequest r;
    r.seq_len = kSeq;
    r.global_batch = kGlobal;
    r.micro_batch = 1;
    r.device_budget = device_gib * kGiB;
    r.host_budget = 400 * kGiB;
    r.space.per_unit_gpu_optimizer = true;
    return r;
  }
};

}  // namespace ferry::test
