// The run's host memory held to its plan, phase by phase.
//
// A thread samples the process's counted resident memory (core/host_memory.h: RssAnon + RssShmem,
// what the OOM killer weighs) every few milliseconds and keeps the peak of each phase of the run
// (model load, state commit, first step, steady state, checkpoint save, final save, ...). Once
// the plan is known, each phase has its planned bytes; a sample past them by more than the margin
// (3% + 512 MiB) is an overrun: logged at once by the sampler, and turned into a ferry::Error on
// the trainer's thread by check() at the next step or phase boundary, so that a run whose memory
// outgrows its plan stops itself, naming the phase, before the OOM killer ends it in the middle of a
// checkpoint. The report (phases, planned, peak) is logged and written as JSON beside the
// metrics, and is what the memory test holds to the plan.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry {

// The report's name in the output directory.
inline constexpr const char* kHostMemoryReport = "host_memory.json";

// The phases of a run.
inline constexpr const char* kPhaseModelLoad = "model load";
inline constexpr const char* kPhasePlanning = "planning";  // the device, its profile, the plan search
inline constexpr const char* kPhaseStateCommit = "state commit";
inline constexpr const char* kPhaseCheckpointLoad = "checkpoint load";
inline constexpr const char* kPhaseFirstStep = "first step";
inline constexpr const char* kPhaseSteadyState = "steady state";
inline constexpr const char* kPhaseCheckpointSave = "checkpoint save";
inline constexpr const char* kPhaseFinalSave = "final save";
// The phases that hold the plan's whole host memory.
inline constexpr const char* kPhasesOfThePlan[] = {kPhasePlanning,  kPhaseStateCommit, kPhaseCheckpointLoad,
                                                   kPhaseFirstStep, kPhaseSteadyState, kPhaseCheckpointSave,
                                                   kPhaseFinalSave};

struct HostMemoryPhase {
  std::string name;
  size_t planned = 0;  // 0: no plan for this phase
  size_t peak = 0;     // the most counted memory a sample saw in it
  size_t samples = 0;
};

class HostMemoryWatch {
 public:
  // Overrun margin: planned * (1 + kMarginFraction) + kMarginBytes.
  static constexpr double kMarginFraction = 0.03;
  static constexpr size_t kMarginBytes = size_t{512} << 20;

  explicit HostMemoryWatch(double interval_seconds = 0.02);
  ~HostMemoryWatch();
  HostMemoryWatch(const HostMemoryWatch&) = delete;
  HostMemoryWatch& operator=(const HostMemoryWatch&) = delete;

  // Starts phase `name` (a phase entered again continues its peak), with its planned bytes when
  // known (0: as set by plan(), else none). Samples at once, so even a short phase has a sample.
  void enter(const std::string& name, size_t planned = 0);
  // Sets the planned bytes of a phase already seen or still to come.
  void plan(const std::string& name, size_t planned);
  // Throws ferry::Error when a sample overran its phase's plan.
  void check() const;
  // The phases entered so far, in the order of the run (a last sample is taken first).
  std::vector<HostMemoryPhase> phases();
  // The report as JSON: {"phases": [{"name", "planned", "peak", "samples"}], "margin_fraction",
  // "margin_bytes"}.
  void write_report(const std::filesystem::path& path);
  // The report in lines for the log.
  std::vector<std::string> describe();
  // Whether the sampler can read the process's memory (/proc); without it, phases stay empty.
  bool available() const { return available_; }

 private:
  void run();
  void sample_locked();
  HostMemoryPhase& phase_locked(const std::string& name);

  const double interval_;
  bool available_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<HostMemoryPhase> phases_;
  size_t current_ = 0;   // index into phases_; phases_ is empty before the first enter()
  std::string overrun_;  // the first overrun's message; empty while none
  std::thread sampler_;
};

// Writes `watch`'s report to <output_dir>/host_memory.json (kHostMemoryReport) when it goes out of scope,
// however the run ends (a failure's report is the one that matters); nothing when output_dir does not exist.
class HostMemoryReportOnExit {
 public:
  HostMemoryReportOnExit(HostMemoryWatch& watch, std::filesystem::path output_dir)
      : watch_(watch), output_dir_(std::move(output_dir)) {}
  ~HostMemoryReportOnExit();
  HostMemoryReportOnExit(const HostMemoryReportOnExit&) = delete;
  HostMemoryReportOnExit& operator=(const HostMemoryReportOnExit&) = delete;

 private:
  HostMemoryWatch& watch_;
  std::filesystem::path output_dir_;
};

}  // namespace ferry
