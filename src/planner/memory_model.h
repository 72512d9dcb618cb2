// Bytes a plan needs on the device and on the host: the one arithmetic shared by the planner (to
// choose) and the engine (to refuse a plan that does not fit, with the numbers, before starting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "device/memory_ledger.h"
#include "io/model_config.h"
#include "model/unit_layout.h"
#include "planner/plan.h"

namespace ferry {

struct DeviceBytes {
  size_t slots = 0;        // weight + gradient slots for streamed units
  size_t resident = 0;     // weights + gradients of resident units
  size_t activations = 0;  // kept boundary activations, offload staging, head input, activation gradients
  size_t scratch = 0;      // one layer's working memory for a micro-chunk, and the head's
  size_t other = 0;        // token ids, rope tables, loss
  size_t total() const { return slots + resident + activations + scratch + other; }
};

struct HostBytes {
  size_t optimizer = 0;    // fp32 masters, m, v (12 bytes per parameter)
  size_t pinned = 0;       // gradient and weight staging per unit, offloaded activations
  size_t total() const { return optimizer + pinned; }
};

size_t round_to_256(size_t bytes);
// The device bytes of `plan` for micro-chunks of `chunk_tokens` tokens, `chunks` per step.
DeviceBytes device_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan, int64_t chunk_tokens,
                         int64_t chunks);
HostBytes host_bytes(const ModelConfig& config, const ModelLayout& layout, const Plan& plan, int64_t chunk_tokens,
                     int64_t chunks);

}  // namespace ferry
