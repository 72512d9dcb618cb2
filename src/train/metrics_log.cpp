#include "train/metrics_log.h"

#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "io/atomic_file.h"

namespace ferry {

void cut_metrics_after(const std::filesystem::path& metrics_file, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(metrics_file, ec)) return;
  std::ifstream in(metrics_file, std::ios::binary);
  FERRY_CHECK(in.good(), "metrics", "cannot read {}; check its permissions", metrics_file.string());

  const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  // (step, kind) -> its line: a step's training record, and its evaluation's where one ran.
  std::map<std::pair<int64_t, bool>, std::string> kept;
  size_t begin = 0;
  while (begin < original.size()) {
    size_t end = original.find('\n', begin);
    if (end == std::string::npos) end = original.size();
    const std::string line = original.substr(begin, end - begin);
    begin = end + 1;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!json_has(record, "step", &nlohmann::json::is_number_integer)) continue;
    const int64_t s = record["step"].get<int64_t>();
    if (s >= 1 && s <= step) kept[{s, record.contains("eval_loss")}] = line;
  }
  std::string text;
  for (const auto& [key, l] : kept) text += l + "\n";
  if (text == original) return;
  write_file_atomic(metrics_file, text);
  log_info("{}: kept the {} records up to step {}, dropped the lines past it", metrics_file.string(),
           kept.size(), step);
}

}  // namespace ferry
