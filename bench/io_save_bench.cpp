// How fast a save writes: write_safetensors (io/safetensors_writer.h) of fp32 tensors as they are
// (a checkpoint's masters, m and v) and of bf16 converted from fp32 as it is written (a model's
// weights), through O_DIRECT (io/direct_file_writer.h) and through write() and the page cache
// (AtomicFile::allow_direct_writes(false)), in turn, each timed to its fsync and rename. Prints
// GB/s of the file's bytes.
//
//   io_save_bench [--dir=DIR] [--gib=N] [--rounds=R] [--threads=T]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"

namespace ferry {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(int argc, char** argv) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "ferry-save-bench";
  double gib = 4;
  int rounds = 2, threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0)
      dir = argv[i] + 6;
    else if (std::strncmp(argv[i], "--gib=", 6) == 0)
      gib = std::atof(argv[i] + 6);
    else if (std::strncmp(argv[i], "--rounds=", 9) == 0)
      rounds = std::atoi(argv[i] + 9);
    else if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::atoi(argv[i] + 10);
    else {
      std::fprintf(stderr, "usage: %s [--dir=DIR] [--gib=N] [--rounds=R] [--threads=T]\n", argv[0]);
      return 2;
    }
  }
  if (threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(threads));
  std::filesystem::create_directories(dir);
  // Tensors of 64M values (a large layer's matrix), filled so that their pages are present.
  const int64_t per_tensor = int64_t{64} << 20;
  const size_t tensors = std::max<size_t>(1, static_cast<size_t>(gib * (1 << 30) / 4 / per_tensor));
  std::vector<float> values(tensors * per_tensor);
  ThreadPool::global().parallel_for(values.size(), [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) values[i] = static_cast<float>(i % 1000) * 1e-3f;
  });
  std::printf("%zu tensors of %lld fp32 values (%.2f GiB) into %s, %zu threads\n", tensors,
              static_cast<long long>(per_tensor), values.size() * 4.0 / (1 << 30), dir.c_str(),
              ThreadPool::global().size());
  const auto save = [&](bool direct, bool convert) {
    AtomicFile::allow_direct_writes(direct);
    std::vector<TensorToWrite> list;
    for (size_t t = 0; t < tensors; ++t) {
      TensorToWrite w;
      w.name = "t";  // appended, not "t" + ...: GCC 12 warns falsely (-Wrestrict) on that operator+
      w.name += std::to_string(t);
      w.dtype = convert ? DType::BF16 : DType::F32;
      w.shape = {per_tensor};
      (convert ? w.f32_source : reinterpret_cast<const float*&>(w.data)) = values.data() + t * per_tensor;
      list.push_back(std::move(w));
    }
    const std::filesystem::path path = dir / "bench.safetensors";
    const auto t0 = std::chrono::steady_clock::now();
    write_safetensors(path, list);
    const double s = seconds_since(t0);
    const double bytes = static_cast<double>(std::filesystem::file_size(path));
    std::printf("  %-28s %-8s %6.2f s  %6.2f GB/s\n", convert ? "bf16 converted from fp32" : "fp32 as it is",
                direct ? "O_DIRECT" : "write()", s, bytes / s / 1e9);
    std::filesystem::remove(path);
  };
  for (int r = 0; r < rounds; ++r)
    for (const bool convert : {false, true}) {
      save(r % 2 == 0, convert);
      save(r % 2 != 0, convert);
    }
  AtomicFile::allow_direct_writes(true);
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  return ferry::run(argc, argv);
}
