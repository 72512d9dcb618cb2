#include "ops/cpu/cpu_ops.h"

namespace ferry {

std::unique_ptr<Ops> make_cpu_ops() {
  return std::make_unique<CpuOps>();
}

}  // namespace ferry
