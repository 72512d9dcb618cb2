#include "profiler/random_device_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace ferry {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a good hash of a counter
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1).
float unit_uniform(uint64_t seed, size_t index) {
  return static_cast<float>(static_cast<double>(mix(seed ^ mix(index)) >> 11) * 0x1.0p-52 - 1.0);
}

void store(void* base, DType dtype, size_t i, float v) {
  switch (dtype) {
    case DType::F32:
      static_cast<float*>(base)[i] = v;
      break;
    case DType::BF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
      break;
    case DType::F16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(v);
      break;
    default:
      FERRY_ASSERT(false, "random fill of a float type only");
  }
}

}  // namespace

RandomDeviceFill::RandomDeviceFill(Device& device, uint64_t seed, size_t staging_bytes)
    : device_(device), seed_(seed), staging_(device, staging_bytes, "profile staging") {}

void RandomDeviceFill::values(void* dst, DType dtype, size_t count, float std_dev) {
  const Run all{0, count, Kind::Random};
  fill(dst, dtype, count, &all, 1, std_dev);
}

void RandomDeviceFill::unit(void* dst, DType dtype, const UnitLayout& unit, float std_dev) {
  std::vector<Run> runs;
  for (const auto& p : unit.params) {
    const Kind kind = p.name.ends_with("bias")                   ? Kind::Zero
                      : p.name.find("norm") != std::string::npos ? Kind::One
                                                                 : Kind::Random;
    runs.push_back({static_cast<size_t>(p.offset), static_cast<size_t>(p.numel), kind});
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
  fill(dst, dtype, static_cast<size_t>(unit.numel), runs.data(), runs.size(), std_dev);
}

void RandomDeviceFill::indices(int32_t* dst, size_t count, int32_t bound) {
  FERRY_ASSERT(bound > 0);
  const uint64_t seed = mix(seed_++);
  const size_t window = staging_.bytes() / sizeof(int32_t);
  int32_t* host = staging_.as<int32_t>();
  for (size_t begin = 0; begin < count; begin += window) {
    const size_t n = std::min(window, count - begin);
    for (size_t i = 0; i < n; ++i)
      host[i] = static_cast<int32_t>(mix(seed ^ mix(begin + i)) % static_cast<uint64_t>(bound));
    device_.copy_to_device(dst + begin, host, n * sizeof(int32_t), StreamKind::HostToDevice);
    device_.synchronize(device_.record(StreamKind::HostToDevice));
  }
}

void RandomDeviceFill::fill(void* dst, DType dtype, size_t count, const Run* runs, size_t run_count,
                            float std_dev) {
  const uint64_t seed = mix(seed_++);
  const float scale = std_dev * std::sqrt(3.0f);  // uniform on [-a, a] has standard deviation a / sqrt(3)
  const size_t element = dtype_size(dtype);
  const size_t window = staging_.bytes() / element;
  FERRY_ASSERT(window > 0);
  for (size_t begin = 0; begin < count; begin += window) {
    const size_t end = std::min(count, begin + window);
    void* host = staging_.data();
    std::memset(host, 0, (end - begin) * element);
    ThreadPool::global().parallel_for(
        end - begin,
        [&](size_t lo, size_t hi) {
          lo += begin;
          hi += begin;
          for (size_t r = 0; r < run_count; ++r) {
            const size_t a = std::max(lo, runs[r].offset), b = std::min(hi, runs[r].offset + runs[r].count);
            if (runs[r].kind == Kind::Zero) continue;
            for (size_t i = a; i < b; ++i)
              store(host, dtype, i - begin, runs[r].kind == Kind::One ? 1.0f : scale * unit_uniform(seed, i));
          }
        },
        size_t{1} << 16);
    device_.copy_to_device(static_cast<char*>(dst) + begin * element, host, (end - begin) * element,
                           StreamKind::HostToDevice);
    device_.synchronize(device_.record(StreamKind::HostToDevice));
  }
}

}  // namespace ferry
