#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace ferry::test {

std::filesystem::path fixtures_dir() {
  // The tests may run from a copy of the tree elsewhere (the GPU machine): FERRY_FIXTURES_DIR wins.
  if (const char* dir = std::getenv("FERRY_FIXTURES_DIR")) return dir;
  return FERRY_FIXTURES_DIR;
}
std::filesystem::path ferry_binary() {
  return FERRY_BINARY;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ScratchDir::ScratchDir(const std::string& tag) {
  static int counter = 0;
  path_ = std::filesystem::temp_directory_path() /
          ("ferry-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<float> random_vector(size_t count, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

void write_token_data(const std::filesystem::path& path, int documents, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int d = 0; d < documents; ++d) {
    const int n = 5 + static_cast<int>(rng() % 36);
    std::string ids, labels;
    for (int i = 0; i < n; ++i) {
      const int64_t id = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
      ids += (i ? "," : "") + std::to_string(id);
      labels += (i ? "," : "") + std::to_string(i < 3 && d % 2 ? -100 : id);
    }
    out << "{\"input_ids\": [" << ids << "], \"labels\": [" << labels << "]}\n";
  }
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

::testing::AssertionResult all_close(const float* actual, const float* expected, size_t count, double rtol,
                                     double atol, const std::string& what) {
  size_t worst = 0, bad = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < count; ++i) {
    const double a = actual[i], e = expected[i];
    const double err = std::fabs(a - e);
    const double allowed = atol + rtol * std::fabs(e);
    const bool ok = std::isfinite(a) && std::isfinite(e) && err <= allowed;
    if (!ok) ++bad;
    const double excess = std::isfinite(a) ? err / (allowed > 0 ? allowed : 1e-30) : INFINITY;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << count << " elements differ; worst at " << worst << ": actual "
         << actual[worst] << " expected " << expected[worst] << " (rtol " << rtol << ", atol " << atol << ")";
}

int run_command(const std::string& command, std::string* output) {
  std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buffer;
  std::string out;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace ferry::test
