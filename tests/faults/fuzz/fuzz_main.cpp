// libFuzzer entry point for one parser of tests/faults/fuzz_targets.h, chosen when built
// (FERRY_FUZZ_TARGET). An input may return or throw ferry::Error; any other exception escapes and
// libFuzzer reports it, as it reports crashes, sanitizer findings, leaks and slow inputs.
//
// FERRY_FUZZ_SEEDS=DIR writes the target's valid seeds into DIR at start; pass DIR as the corpus.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "fault_inputs.h"
#include "fuzz_targets.h"

namespace {

const ferry::faults::FuzzTarget* g_target = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ferry::set_log_level(ferry::LogLevel::Off);
  ferry::ThreadPool::set_global_threads(1);
  g_target = &ferry::faults::fuzz_target(FERRY_FUZZ_TARGET);
  if (const char* dir = std::getenv("FERRY_FUZZ_SEEDS")) {
    std::filesystem::create_directories(dir);
    const std::vector<std::string> seeds = g_target->seeds();
    for (size_t i = 0; i < seeds.size(); ++i)
      ferry::faults::write_bytes(std::filesystem::path(dir) / ("seed-" + std::to_string(i)), seeds[i]);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    g_target->run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const ferry::Error&) {
  }
  return 0;
}
