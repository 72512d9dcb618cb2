// `ferry demo`: a self-checking fine-tuning run. It creates a tiny byte-vocabulary model and a
// synthetic task with exact answers (reversing a short string), measures exact-match accuracy,
// fine-tunes, and measures again.
#pragma once

#include <filesystem>

namespace ferry {

struct DemoOptions {
  std::filesystem::path out_dir = "demo-out";
  int64_t steps = 500;
  int64_t threads = 0;
  uint64_t seed = 1234;
  int64_t eval_examples = 200;
  double learning_rate = 1e-3;
};

struct DemoResult {
  double accuracy_before = 0.0;
  double accuracy_after = 0.0;
  double first_loss = 0.0;
  double last_loss = 0.0;
};

DemoResult run_demo(const DemoOptions& options);

}  // namespace ferry
