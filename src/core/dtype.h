// Element types of tensors on disk and in memory, and the bf16/fp16 <-> fp32 conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ferry {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16", ...
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; returns false when it is unknown.
bool parse_dtype(std::string_view name, DType* out);
// Parses a Hugging Face torch_dtype string ("bfloat16", "float32", "float16").
bool parse_torch_dtype(std::string_view name, DType* out);
std::string_view torch_dtype_name(DType dtype);

// bf16 is the top half of an fp32. Conversion rounds to nearest even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_f32(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t value);

// Converts `count` elements of `src` (of type `from`) to fp32. Supports F32, BF16, F16, F64.
void convert_to_f32(const void* src, DType from, float* dst, size_t count);
// Converts `count` fp32 values to `to` (F32, BF16, F16, F64), rounding to nearest even.
void convert_from_f32(const float* src, DType to, void* dst, size_t count);

}  // namespace ferry
