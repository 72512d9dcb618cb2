// Helpers shared by the tests: fixture paths, scratch directories, random inputs, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/check.h"

namespace ferry::test {

std::filesystem::path fixtures_dir();
// The ferry executable built beside the tests.
std::filesystem::path ferry_binary();
// A fresh, empty directory under the system temp dir, removed when the returned object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The bytes of a file (a failed expectation when it cannot be read).
std::string read_file(const std::filesystem::path& path);

// Uniform values in [lo, hi) from a fixed seed; never all zeros.
std::vector<float> random_vector(size_t count, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// Pre-tokenized training data: `documents` JSONL records of 5..40 random token ids below `vocab`
// (`input_ids`, `labels`), every odd one with its first three labels masked (-100) as a prompt.
void write_token_data(const std::filesystem::path& path, int documents, int64_t vocab, uint64_t seed);

// Checks |actual - expected| <= atol + rtol * |expected| elementwise; NaN never passes.
// Reports the worst element on failure.
::testing::AssertionResult all_close(const float* actual, const float* expected, size_t count, double rtol,
                                     double atol, const std::string& what = "");
inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<float>& expected, double rtol, double atol,
                                            const std::string& what = "") {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << what << ": size " << actual.size() << " vs " << expected.size();
  return all_close(actual.data(), expected.data(), actual.size(), rtol, atol, what);
}

// Runs `body`, expecting a ferry::Error whose message holds every one of `parts`. Any other
// exception, or none, fails.
template <typename Body>
::testing::AssertionResult throws_with(Body body, std::initializer_list<std::string> parts) {
  try {
    body();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      if (message.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << message;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-ferry exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no ferry::Error thrown";
}

// Runs a shell command; returns its exit status and captures stdout+stderr.
int run_command(const std::string& command, std::string* output);

}  // namespace ferry::test
