// The ops that run on a device's compute stream (DESIGN.md §3: ops sit above the device).
#pragma once

#include <memory>

#include "device/device.h"
#include "ops/ops.h"

namespace ferry {

// A device with native streams (CudaDevice) gets the CUDA kernels issued to its compute stream;
// a device whose streams are host threads (SimDevice) gets the CPU reference queued on its compute
// stream (QueuedOps). Either way every op is asynchronous and ordered by the compute stream.
// A device that carries a trace recorder (TracingDevice) gets them wrapped in TracingOps.
std::unique_ptr<Ops> make_device_ops(Device& device);

}  // namespace ferry
