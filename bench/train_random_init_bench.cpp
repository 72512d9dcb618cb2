// A preset's random weights (train/model_init.h over core/normal_fill.h), as `ferry train` makes
// them before step 1 (init_random_unit per unit into one buffer, on the thread pool), beside the
// generator the presets used before (std::mt19937_64 with libm's double log, cos and sin per
// Box-Muller pair), timed here on one thread for the same count:
//   fill_normal, one thread: ns a value
//   the previous generator, one thread: ns a value
//   init_random_unit over every unit of the preset, the pool's threads: s and ns a value, the
//   first unit (whose buffer is allocated then) apart
//
//   train_random_init_bench [--preset=llama-3.2-1b] [--threads=N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/normal_fill.h"
#include "core/thread_pool.h"
#include "model/unit_layout.h"
#include "train/model_init.h"

namespace ferry {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What the presets drew until core/normal_fill.h: one generator a piece, libm per pair.
void previous_generator(float* dst, int64_t count, uint64_t seed, float std_dev) {
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < count; i += 2) {
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    dst[i] = std_dev * static_cast<float>(r * std::cos(2.0 * M_PI * u2));
    if (i + 1 < count) dst[i + 1] = std_dev * static_cast<float>(r * std::sin(2.0 * M_PI * u2));
  }
}

int run(int argc, char** argv) {
  std::string preset = "llama-3.2-1b";
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--preset=", 9) == 0)
      preset = argv[i] + 9;
    else if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::atoi(argv[i] + 10);
    else {
      std::fprintf(stderr, "usage: %s [--preset=NAME] [--threads=N]\n", argv[0]);
      return 2;
    }
  }
  if (threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(threads));

  const int64_t n = int64_t{1} << 24;
  std::vector<float> values(n, 1.0f);
  fill_normal(values.data(), n, 1, 0.02f);  // pages touched before timing either
  auto t0 = std::chrono::steady_clock::now();
  fill_normal(values.data(), n, 2, 0.02f);
  std::printf("fill_normal, one thread: %.2f ns a value\n", seconds_since(t0) * 1e9 / n);
  t0 = std::chrono::steady_clock::now();
  previous_generator(values.data(), n, 2, 0.02f);
  std::printf("previous generator (mt19937_64, libm), one thread: %.2f ns a value\n",
              seconds_since(t0) * 1e9 / n);

  const ModelConfig config = preset_config("llama", preset);
  const ModelLayout layout = build_model_layout(config);
  std::vector<float> unit;
  double first_s = 0, rest_s = 0;
  int64_t first_n = 0, rest_n = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    t0 = std::chrono::steady_clock::now();
    init_random_unit(config, layout, 42, u, unit);
    (u == 0 ? first_s : rest_s) += seconds_since(t0);
    (u == 0 ? first_n : rest_n) += static_cast<int64_t>(unit.size());
  }
  std::printf(
      "init_random_unit, llama %s, %zu threads: %.2f s for %lld values; the first unit %.2f s (%.2f ns a "
      "value, its buffer allocated), the others %.2f ns a value\n",
      preset.c_str(), ThreadPool::global().size(), first_s + rest_s, static_cast<long long>(first_n + rest_n),
      first_s, first_s * 1e9 / static_cast<double>(first_n), rest_s * 1e9 / static_cast<double>(rest_n));
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
