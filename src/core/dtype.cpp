#include "core/dtype.h"

#include "core/error.h"

namespace ferry {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::Bool:
      return 1;
  }
  FERRY_ASSERT(false, "unknown dtype");
  return 0;
}

namespace {
struct DTypeNames {
  DType dtype;
  std::string_view safetensors;
  std::string_view torch;
};
constexpr DTypeNames kNames[] = {
    {DType::F32, "F32", "float32"}, {DType::F16, "F16", "float16"}, {DType::BF16, "BF16", "bfloat16"},
    {DType::F64, "F64", "float64"}, {DType::I64, "I64", "int64"},   {DType::I32, "I32", "int32"},
    {DType::I16, "I16", "int16"},   {DType::I8, "I8", "int8"},      {DType::U8, "U8", "uint8"},
    {DType::Bool, "BOOL", "bool"},
};
}  // namespace

std::string_view dtype_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.safetensors;
  return "?";
}

std::string_view torch_dtype_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.torch;
  return "?";
}

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& n : kNames)
    if (n.safetensors == name) {
      *out = n.dtype;
      return true;
    }
  return false;
}

bool parse_torch_dtype(std::string_view name, DType* out) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  if (name == "float") name = "float32";
  if (name == "half") name = "float16";
  for (const auto& n : kNames)
    if (n.torch == name) {
      *out = n.dtype;
      return true;
    }
  return false;
}

uint16_t f32_to_f16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow or inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in f16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14 + (112 - exponent) ... bits dropped below f16 subnormal unit
    uint32_t half = mantissa >> (shift - 0);
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float f16_to_f32(uint16_t value) {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      exponent = 113;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void convert_to_f32(const void* src, DType from, float* dst, size_t count) {
  switch (from) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::F64: {
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      fail("convert_to_f32", "cannot convert {} to float32; weights must be F32, BF16, F16 or F64",
           dtype_name(from));
  }
}

void convert_from_f32(const float* src, DType to, void* dst, size_t count) {
  switch (to) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::F64: {
      auto* d = static_cast<double*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = src[i];
      return;
    }
    default:
      fail("convert_from_f32", "cannot convert float32 to {}", dtype_name(to));
  }
}

}  // namespace ferry
