// The lean AdamW pass the machine profiler times (profiler/machine_profiler.h), one per lean
// optimizer_state format: one unit's step as the engine runs it (optim/lean_adamw.h), the bf16
// gradient in the unit's weight staging and the new bf16 weights written over it, beside the
// format's state arrays. Its rate is the planner's for that format (planner/adamw_rate.h): the
// lean kernel is compute-bound on some hosts and DRAM-bound on others, which only timing tells.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "optim/host_array.h"
#include "optim/lean_adamw.h"
#include "optim/state_format.h"

namespace ferry {

class LeanAdamWProbe {
 public:
  // The state in HostArrays as the engine keeps it, first written by the pool's threads; masters
  // and moments of ordinary sizes, so that the encoders see every code range.
  LeanAdamWProbe(OptimizerStateFormat format, size_t params, ThreadPool& pool);
  void pass();  // one step over every parameter
  size_t params() const { return n_; }

 private:
  size_t n_;
  ThreadPool& pool_;
  std::vector<HostArray> arrays_;
  LeanUnitState state_;
  std::unique_ptr<uint16_t[]> staging_;
  int64_t step_ = 0;
};

}  // namespace ferry
