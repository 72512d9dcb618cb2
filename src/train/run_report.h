// output_dir/report.html: one self-contained page (no network, nothing beside it) with the run's
// curves -- training and evaluation loss, learning rate, gradient norm, tokens/s -- drawn as
// inline SVG from metrics.jsonl, and the facts of the run (model, device and plan, memory, time).
// A small script checks the drawn curves in the browser that opens it and says so in the page
// (body data-check), which a test reads back from a real headless browser.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ferry {

inline constexpr const char* kRunReport = "report.html";

struct ReportFact {
  std::string label, value;
};

// Reads output_dir/metrics.jsonl and writes output_dir/report.html (atomically).
void write_run_report(const std::filesystem::path& output_dir, const std::string& title,
                      const std::vector<ReportFact>& facts);

}  // namespace ferry
