#include "train/host_memory_watch.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "device/memory_ledger.h"
#include "io/atomic_file.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "host memory";

size_t limit_of(size_t planned) {
  return static_cast<size_t>(static_cast<double>(planned) * (1.0 + HostMemoryWatch::kMarginFraction)) +
         HostMemoryWatch::kMarginBytes;
}

}  // namespace

HostMemoryWatch::HostMemoryWatch(double interval_seconds) : interval_(interval_seconds) {
  available_ = read_process_memory().has_value();
  if (available_) sampler_ = std::thread([this] { run(); });
}

HostMemoryWatch::~HostMemoryWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

HostMemoryPhase& HostMemoryWatch::phase_locked(const std::string& name) {
  for (HostMemoryPhase& p : phases_)
    if (p.name == name) return p;
  phases_.push_back(HostMemoryPhase{name, 0, 0, 0});
  return phases_.back();
}

void HostMemoryWatch::enter(const std::string& name, size_t planned) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!phases_.empty()) sample_locked();  // the phase that ends gets its last sample
  HostMemoryPhase& p = phase_locked(name);
  if (planned > 0) p.planned = planned;
  current_ = static_cast<size_t>(&p - phases_.data());
  sample_locked();
}

void HostMemoryWatch::plan(const std::string& name, size_t planned) {
  std::lock_guard<std::mutex> lock(mutex_);
  phase_locked(name).planned = planned;  // a new phase goes at the end: current_ still names its own
}

void HostMemoryWatch::sample_locked() {
  if (!available_ || phases_.empty()) return;
  const auto now = read_process_memory();
  if (!now) return;
  HostMemoryPhase& p = phases_[current_];
  const size_t bytes = now->counted();
  p.peak = std::max(p.peak, bytes);
  ++p.samples;
  if (overrun_.empty() && p.planned > 0 && bytes > limit_of(p.planned)) {
    overrun_ = fmt::format(
        "the run holds {} of host memory (RssAnon {} + RssShmem {}) in phase '{}', more than its plan of {} "
        "with the margin of {:.0f}% + {}; it stops here so that the kernel's OOM killer does not end it in "
        "the middle of a checkpoint (the last complete checkpoint is intact). Set host_memory to what this "
        "machine can give, or report this with the run's log: memory the plan does not count is a bug",
        format_bytes(bytes), format_bytes(now->anon), format_bytes(now->shmem), p.name,
        format_bytes(p.planned), 100.0 * kMarginFraction, format_bytes(kMarginBytes));
    log_line(LogLevel::Error, "[host memory] " + overrun_);
  }
}

void HostMemoryWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    sample_locked();
    wake_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stopping_; });
  }
}

void HostMemoryWatch::check() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!overrun_.empty()) fail(kWhere, "{}", overrun_);
}

std::vector<HostMemoryPhase> HostMemoryWatch::phases() {
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked();
  std::vector<HostMemoryPhase> seen;
  for (const HostMemoryPhase& p : phases_)
    if (p.samples > 0) seen.push_back(p);  // not those only planned
  return seen;
}

void HostMemoryWatch::write_report(const std::filesystem::path& path) {
  nlohmann::json phases = nlohmann::json::array();
  for (const HostMemoryPhase& p : this->phases())
    phases.push_back({{"name", p.name}, {"planned", p.planned}, {"peak", p.peak}, {"samples", p.samples}});
  const nlohmann::json report = {
      {"phases", phases}, {"margin_fraction", kMarginFraction}, {"margin_bytes", kMarginBytes}};
  write_file_atomic(path, report.dump(2) + "\n");
}

std::vector<std::string> HostMemoryWatch::describe() {
  std::vector<std::string> lines;
  for (const HostMemoryPhase& p : phases()) {
    if (p.planned == 0) {
      lines.push_back(fmt::format("{}: peak {}", p.name, format_bytes(p.peak)));
      continue;
    }
    const double share = 100.0 * static_cast<double>(p.peak) / static_cast<double>(p.planned);
    lines.push_back(fmt::format("{}: peak {} of {} planned ({:.1f}%)", p.name, format_bytes(p.peak),
                                format_bytes(p.planned), share));
  }
  return lines;
}

HostMemoryReportOnExit::~HostMemoryReportOnExit() {
  std::error_code ec;
  if (!watch_.available() || !std::filesystem::is_directory(output_dir_, ec)) return;
  try {
    watch_.write_report(output_dir_ / kHostMemoryReport);
  } catch (const std::exception& e) {
    log_warn("host memory: the report could not be written ({})", e.what());
  }
}

}  // namespace ferry
