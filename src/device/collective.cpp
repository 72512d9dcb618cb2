#include "device/collective.h"

#include <cstdint>
#include <cstring>

namespace ferry {

bool collective_type_supported(DType type) {
  return type == DType::F32 || type == DType::BF16;
}

void sum_in_rank_order(const std::vector<const void*>& parts, size_t offset, size_t count, DType type,
                       void* out) {
  auto* bytes = static_cast<std::byte*>(out);
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (const void* part : parts) {
      if (type == DType::F32) {
        float v;
        std::memcpy(&v, static_cast<const std::byte*>(part) + (offset + i) * 4, 4);
        sum += v;
      } else {
        uint16_t h;
        std::memcpy(&h, static_cast<const std::byte*>(part) + (offset + i) * 2, 2);
        sum += bf16_to_f32(h);
      }
    }
    if (type == DType::F32) {
      std::memcpy(bytes + i * 4, &sum, 4);
    } else {
      const uint16_t h = f32_to_bf16(sum);
      std::memcpy(bytes + i * 2, &h, 2);
    }
  }
}

}  // namespace ferry
