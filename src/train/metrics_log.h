// OUTPUT/metrics.jsonl: one JSON object per optimizer step ({"step", "loss", "lr", ...}), and one
// per evaluation ({"step", "eval_loss", ...}) after its step's, appended as the run goes. A resumed run
// continues from its checkpoint's step, so the lines a run wrote past that checkpoint (before it was killed)
// must go first, or those steps appear twice.
#pragma once

#include <cstdint>
#include <filesystem>

namespace ferry {

inline constexpr const char* kMetricsFile = "metrics.jsonl";
// OUTPUT/train.log: the run's log lines (core/log.h's LogFile), continued by a resumed run.
inline constexpr const char* kTrainLogFile = "train.log";

// Keeps the lines of `metrics_file` whose step is at most `step`, one training record and one
// evaluation per step (the last written, in step order), and drops every other line: steps past a resumed
// checkpoint, and the torn last line of a killed run. The file is replaced atomically, and only when
// something changes; a missing file stays missing.
void cut_metrics_after(const std::filesystem::path& metrics_file, int64_t step);

}  // namespace ferry
