// A build without a CUDA toolkit: the CUDA device fails loudly; SimDevice and the CPU backend remain.
#include "core/check.h"
#include "device/device.h"

namespace ferry {

bool cuda_available() {
  return false;
}

int cuda_device_count() {
  return 0;
}

std::unique_ptr<Device> make_cuda_device(int, size_t) {
  raise("cuda",
        "this ferry was built without CUDA; rebuild on a machine with the CUDA toolkit, or train "
        "on the CPU backend");
}

}  // namespace ferry
