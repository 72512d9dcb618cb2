// A preset's random weights (train/model_init.h over core/normal_fill.h), as `ferry train` makes
// them before step 1 (init_random_unit per unit, on the thread pool), beside the
// generator the presets used before (std::mt19937_64 with libm's double log, cos and sin per
// Box-Muller pair), timed here on one thread for the same count:
//   fill_normal, one thread: ns a value
//   the previous generator, one thread: ns a value
//   every unit of the preset into fresh fp32 masters on the pool's threads, as a run's state commit
//   makes them: straight from init_random_unit (an exact state in RAM), and through one buffer a
//   unit copied in (a lean format, the disk tier), three times each in turn: s and ns a value
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
#include "optim/host_array.h"
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
  int64_t values_in_all = 0;
  for (const UnitLayout& u : layout.units) values_in_all += u.numel;
  // The masters a run's state holds (fresh huge-page mappings, one a unit), filled as a run's
  // state commit fills them: straight from the generator (what a run of an exact state in RAM
  // does), or through one buffer a unit that is then copied in (what it did before, and does for
  // a lean format or the disk tier). Then their commit, which finds the pages present.
  const auto fill_masters = [&](bool through_buffer) {
    std::vector<HostArray> masters;
    for (const UnitLayout& u : layout.units) masters.emplace_back(static_cast<size_t>(u.numel), "masters");
    std::vector<float> buffer;
    const auto start = std::chrono::steady_clock::now();
    for (size_t u = 0; u < layout.units.size(); ++u) {
      if (through_buffer) {
        buffer.resize(masters[u].size());
        init_random_unit(config, layout, 42, u, buffer);
        masters[u].assign(buffer);
      } else {
        init_random_unit(config, layout, 42, u, masters[u].span());
      }
    }
    const double filled_s = seconds_since(start);
    const auto commit_start = std::chrono::steady_clock::now();
    for (HostArray& m : masters) m.commit(ThreadPool::global());
    std::printf("  %-32s %.2f s (%.2f ns a value), then committed in %.2f s\n",
                through_buffer ? "through a buffer, then copied:" : "straight into the masters:", filled_s,
                filled_s * 1e9 / static_cast<double>(values_in_all), seconds_since(commit_start));
  };
  std::printf("the masters of llama %s (%lld values) filled on %zu threads:\n", preset.c_str(),
              static_cast<long long>(values_in_all), ThreadPool::global().size());
  for (int round = 0; round < 3; ++round) {  // in turn, each first once (the first fill meets colder memory)
    fill_masters(round % 2 == 1);
    fill_masters(round % 2 == 0);
  }
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
