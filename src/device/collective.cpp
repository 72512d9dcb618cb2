#include "device/collective.h"

namespace ferry {

bool collective_type_supported(DType type) {
  return type == DType::F32 || type == DType::BF16;
}

}  // namespace ferry
