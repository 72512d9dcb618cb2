// The seeded fuzzer: every parser of users' files (fuzz_targets.h) runs on a fixed number of
// inputs made by the deterministic mutator from valid seeds, and must return or throw ferry::Error.
// Another exception fails the test with the input that caused it; a crash or a hang fails the
// binary (ctest's timeout). The inputs are the same on every run, so a failure reproduces with
// --gtest_filter and the iteration it names.
//
// FERRY_FUZZ_ITERATIONS=N runs N inputs per target instead of the default (for a longer local run).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <typeinfo>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "fault_inputs.h"
#include "fuzz_targets.h"
#include "mutator.h"

namespace ferry::faults {
namespace {

// Inputs per target in CI: about a second and a half of one core each (a tokenizer is built and
// run per input, so those targets get fewer), some 10 s for all eight.
size_t iterations(std::string_view target) {
  if (const char* n = std::getenv("FERRY_FUZZ_ITERATIONS")) return std::strtoull(n, nullptr, 10);
  if (target.rfind("tokenizer", 0) == 0) return 6000;
  if (target == "jsonl_records") return 8000;
  return 20000;
}

// The input for a failure message: its size, its first bytes escaped, and a file that holds it
// whole (for a libFuzzer target or a debugger).
std::string describe(const std::string& input, const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ferry-fuzz-failures";
  std::filesystem::create_directories(dir);
  write_bytes(dir / name, input);
  std::string shown;
  for (size_t i = 0; i < input.size() && shown.size() < 300; ++i) {
    const auto c = static_cast<unsigned char>(input[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      shown += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[c >> 4];
      shown += kHex[c & 15];
    }
  }
  return std::to_string(input.size()) + " bytes (saved as " + (dir / name).string() + "): " + shown;
}

// The parsers are what is fuzzed, not the thread pool: with one thread, the data loader's
// parallel_for runs inline and an input costs what its parsing costs, not thread wake-ups.
const bool kOneThread = (ThreadPool::set_global_threads(1), true);

class ParserFuzz : public ::testing::TestWithParam<const char*> {};

TEST_P(ParserFuzz, EverySeedIsAccepted) {
  const FuzzTarget& target = fuzz_target(GetParam());
  for (const std::string& seed : target.seeds()) {
    try {
      target.run(seed);
    } catch (const Error& e) {
      ADD_FAILURE() << "a seed is refused, so the mutations start from a broken input: " << e.what();
    }
  }
}

TEST_P(ParserFuzz, MutatedInputsReturnOrThrowFerryError) {
  const FuzzTarget& target = fuzz_target(GetParam());
  Mutator mutator(target.seeds(), target.tokens(), target.json, /*rng_seed=*/20261201);
  const LogLevel level = log_level();
  set_log_level(LogLevel::Off);  // skip_malformed and other warnings would flood the output
  size_t refused = 0;
  const size_t n = iterations(target.name);
  for (size_t i = 0; i < n; ++i) {
    const std::string input = mutator.next();
    try {
      target.run(input);
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << target.name << " iteration " << i << " threw " << typeid(e).name() << " (" << e.what()
                    << ") instead of ferry::Error, on "
                    << describe(input, std::string(target.name) + "-" + std::to_string(i));
    }
  }
  set_log_level(level);
  // Mutations that never get past the first check would test nothing else.
  EXPECT_GT(refused, n / 10);
  EXPECT_LT(refused, n);
}

INSTANTIATE_TEST_SUITE_P(Targets, ParserFuzz,
                         ::testing::Values("safetensors_file", "safetensors_header", "config_json",
                                           "tokenizer_json", "tokenizer_config_json", "jsonl_records",
                                           "train_config_yaml", "chat_template"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace ferry::faults
