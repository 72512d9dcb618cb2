// The formats the host may keep a unit's optimizer state in (config `optimizer_state:`), and the
// arrays each format is made of. fp32 is the default and the exact one (DESIGN.md §1: torch's AdamW
// bit for bit); the others are opt-in, lean and approximate, and labelled so wherever they are used.
//
//   name        master (bytes/param)              m, v (bytes/param)                 total
//   fp32        fp32 (4)                          fp32, fp32 (4 + 4)                 12
//   fp32_q8     fp32 (4)                          8-bit block-quantized (1 + 1)      6.125
//   bf16c8_q8   bf16 + 8-bit compensation (2+1)   8-bit block-quantized (1 + 1)      5.125
//   bf16sr_q8   bf16, stochastic rounding (2)     8-bit block-quantized (1 + 1)      4.125
//
// The 8-bit moments keep one fp32 scale per block of kStateBlock elements for each of m and v
// (2 * 4 / 64 = 0.125 bytes/param). Their numerics and the compensated master's are those of
// optim/lean_adamw.h; docs/optimizer_state.md tells users which to pick.
//
// A unit's state in a format is a short list of contiguous arrays (state_arrays) whose byte sizes
// depend only on the format and the unit's element count, so that other tiers (the disk) can move
// them as opaque bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

enum class OptimizerStateFormat {
  Fp32,      // exact: fp32 master, m, v
  Fp32Q8,    // fp32 master; m, v 8-bit block-quantized
  Bf16C8Q8,  // bf16 master + 8-bit compensation; m, v 8-bit
  Bf16SrQ8,  // bf16 master, stochastically rounded; m, v 8-bit
};

// The lean formats, in the enum's order: what a profile measures a rate for and stores.
inline constexpr OptimizerStateFormat kLeanStateFormats[] = {
    OptimizerStateFormat::Fp32Q8, OptimizerStateFormat::Bf16C8Q8, OptimizerStateFormat::Bf16SrQ8};

// Elements per quantization block of the 8-bit moments, counted from the unit's first element.
// 64 divides the hidden size of every model family ferry trains, so an embedding row is whole
// blocks and the row-sparse embedding update touches no block it does not own.
inline constexpr size_t kStateBlock = 64;

// What one array of a unit's state holds.
enum class StateArrayKind {
  MasterF32,      // fp32 master, 4 bytes per element
  MasterBf16,     // bf16 master (the high half), 2 bytes per element
  Compensation8,  // int8: the master's rounding error in 1/256 of its bf16 ulp
  MomentF32,      // fp32 m or v
  MomentQ8,       // int8 m or uint8 sqrt(v), 1 byte per element
  BlockScaleF32,  // one fp32 scale per kStateBlock elements
};

struct StateArraySpec {
  const char* name;  // stable: checkpoint tensor names and disk files use it
  StateArrayKind kind;
};

// The arrays of a unit's state, in a fixed order.
std::vector<StateArraySpec> state_arrays(OptimizerStateFormat format);
// The bytes of one array for a unit of `numel` elements.
size_t state_array_bytes(StateArrayKind kind, size_t numel);
// The bytes of a unit's whole state (the sum over state_arrays).
size_t state_bytes(OptimizerStateFormat format, size_t numel);
// The asymptotic host bytes per parameter (the table above).
double state_bytes_per_param(OptimizerStateFormat format);
// Bytes of DRAM traffic per parameter of one CPU AdamW pass with bf16 gradients and the bf16 copy
// written over the gradient (the state read and written, 2 bytes of gradient read and 2 of weights
// written into the same lines): 26 for fp32 (optim/cpu_adamw.h).
double adamw_traffic_bytes_per_param(OptimizerStateFormat format);

// The config spelling ("fp32", "fp32_q8", ...), and its parse; false for an unknown name.
const char* state_format_name(OptimizerStateFormat format);
bool parse_state_format(std::string_view name, OptimizerStateFormat* out);
// Every name, comma-separated, for error messages.
std::string state_format_names();
// One line for logs and `ferry plan`: the format, exact or lean, its bytes/param.
std::string describe_state_format(OptimizerStateFormat format);

inline bool is_exact(OptimizerStateFormat format) {
  return format == OptimizerStateFormat::Fp32;
}

}  // namespace ferry
