// A build without CUDA: the CUDA backend fails loudly where it is asked for.
#include "core/error.h"
#include "ops/ops.h"

namespace ferry {

std::unique_ptr<Ops> make_cuda_ops(void* /*stream*/, WorkspaceAllocator /*allocator*/) {
  fail("ops",
       "this ferry was built without CUDA; rebuild on a machine with the CUDA toolkit (nvcc) to train on "
       "the GPU");
}

}  // namespace ferry
