// A build without CUDA has no NCCL: several devices run as simulated devices (ThreadCollective).
#include "device/nccl_collective.h"

#include "core/check.h"

namespace ferry {

std::string nccl_unavailable_reason() {
  return "this ferry was built without CUDA; rebuild on a machine with the CUDA toolkit for NCCL";
}

std::vector<std::unique_ptr<Collective>> nccl_collectives(const std::vector<Device*>&) {
  raise("nccl", nccl_unavailable_reason());
}

std::unique_ptr<Collective> nccl_collective(Device&, int, int, const ShareId&) {
  raise("nccl", nccl_unavailable_reason());
}

}  // namespace ferry
