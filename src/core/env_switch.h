// The environment's on/off switches (FERRY_CUDNN, FERRY_FLASH_WGMMA, FERRY_GEMM_TUNING,
// FERRY_DIRECT_SAVES): each exists to turn a default off. "0", "off", "false" and "no" (in any
// case) turn it off; unset, empty, "1", "on", "true" and "yes" leave it on. Any other value is a
// mistake said once on stderr, naming the variable and the values it takes, and the switch stays
// on: a typo in a switch should not stop a run (FERRY_LOG_LEVEL does the same).
// Plain declarations, no fmt: CUDA sources read switches too.
#pragma once

#include <optional>
#include <string_view>

namespace ferry {

// The value's meaning: on, off, or nothing for a value that is neither.
std::optional<bool> parse_env_switch(std::string_view value);

// `name`'s setting in the environment.
bool env_switch_on(const char* name);

}  // namespace ferry
