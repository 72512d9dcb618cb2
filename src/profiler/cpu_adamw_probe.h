// The CPU AdamW pass the machine profiler times (profiler/machine_profiler.h): one unit's fused step
// as the engine runs it (unit_updater.cpp) -- the bf16 gradient lands in the unit's weight staging
// and the new bf16 weights are written over it, beside the fp32 master, m and v.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/thread_pool.h"
#include "optim/host_array.h"

namespace ferry {

class CpuAdamWProbe {
 public:
  // The state in HostArrays (huge pages where the kernel offers them) as the engine keeps it, first
  // written by the pool's threads, as the engine's state is by the threads that update it.
  CpuAdamWProbe(size_t params, ThreadPool& pool);
  void pass();  // one fused step over every parameter
  size_t params() const { return n_; }

 private:
  size_t n_;
  ThreadPool& pool_;
  HostArray master_, m_, v_;
  std::unique_ptr<uint16_t[]> staging_;
  int64_t step_ = 0;
};

}  // namespace ferry
