// The label that marks a token as not counted by the loss (PyTorch's CrossEntropyLoss default).
#pragma once

#include <cstdint>

namespace ferry {

inline constexpr int32_t kIgnoreIndex = -100;

}  // namespace ferry
