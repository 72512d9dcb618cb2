#include "optim/state_format.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ferry {

namespace {

constexpr struct {
  OptimizerStateFormat format;
  const char* name;
  const char* what;
} kFormats[] = {
    {OptimizerStateFormat::Fp32, "fp32", "exact: fp32 master, m and v (torch's AdamW bit for bit)"},
    {OptimizerStateFormat::Fp32Q8, "fp32_q8", "lean: fp32 master, 8-bit block-quantized m and v"},
    {OptimizerStateFormat::Bf16C8Q8, "bf16c8_q8",
     "lean: bf16 master with an 8-bit compensation (16-bit significand), 8-bit m and v"},
    {OptimizerStateFormat::Bf16SrQ8, "bf16sr_q8",
     "lean: bf16 master with stochastic rounding, 8-bit m and v"},
};

}  // namespace

std::vector<StateArraySpec> state_arrays(OptimizerStateFormat format) {
  const std::vector<StateArraySpec> q8_moments = {{"exp_avg_q8", StateArrayKind::MomentQ8},
                                                  {"exp_avg_scale", StateArrayKind::BlockScaleF32},
                                                  {"exp_avg_sq_q8", StateArrayKind::MomentQ8},
                                                  {"exp_avg_sq_scale", StateArrayKind::BlockScaleF32}};
  std::vector<StateArraySpec> arrays;
  switch (format) {
    case OptimizerStateFormat::Fp32:
      return {{"master", StateArrayKind::MasterF32},
              {"exp_avg", StateArrayKind::MomentF32},
              {"exp_avg_sq", StateArrayKind::MomentF32}};
    case OptimizerStateFormat::Fp32Q8:
      arrays = {{"master", StateArrayKind::MasterF32}};
      break;
    case OptimizerStateFormat::Bf16C8Q8:
      arrays = {{"master_bf16", StateArrayKind::MasterBf16}, {"master_comp8", StateArrayKind::Compensation8}};
      break;
    case OptimizerStateFormat::Bf16SrQ8:
      arrays = {{"master_bf16", StateArrayKind::MasterBf16}};
      break;
  }
  arrays.insert(arrays.end(), q8_moments.begin(), q8_moments.end());
  return arrays;
}

size_t state_array_bytes(StateArrayKind kind, size_t numel) {
  switch (kind) {
    case StateArrayKind::MasterF32:
    case StateArrayKind::MomentF32:
      return 4 * numel;
    case StateArrayKind::MasterBf16:
      return 2 * numel;
    case StateArrayKind::Compensation8:
    case StateArrayKind::MomentQ8:
      return numel;
    case StateArrayKind::BlockScaleF32:
      return 4 * ((numel + kStateBlock - 1) / kStateBlock);
  }
  return 0;
}

size_t state_bytes(OptimizerStateFormat format, size_t numel) {
  size_t bytes = 0;
  for (const StateArraySpec& a : state_arrays(format)) bytes += state_array_bytes(a.kind, numel);
  return bytes;
}

double state_bytes_per_param(OptimizerStateFormat format) {
  // Exact for a multiple of kStateBlock elements, and the limit for large units.
  return static_cast<double>(state_bytes(format, kStateBlock * 1024)) / (kStateBlock * 1024);
}

double adamw_traffic_bytes_per_param(OptimizerStateFormat format) {
  return 2.0 * state_bytes_per_param(format) + 2.0;
}

const char* state_format_name(OptimizerStateFormat format) {
  for (const auto& f : kFormats)
    if (f.format == format) return f.name;
  return "?";
}

bool parse_state_format(std::string_view name, OptimizerStateFormat* out) {
  for (const auto& f : kFormats)
    if (name == f.name) {
      *out = f.format;
      return true;
    }
  return false;
}

std::string state_format_names() {
  std::string names;
  for (const auto& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

std::string describe_state_format(OptimizerStateFormat format) {
  for (const auto& f : kFormats)
    if (f.format == format)
      return fmt::format("optimizer_state {} ({}; {:.3g} bytes/param)", f.name, f.what,
                         state_bytes_per_param(format));
  return "?";
}

}  // namespace ferry
