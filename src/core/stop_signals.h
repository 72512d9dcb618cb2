// SIGINT, SIGTERM and SIGHUP as a request to stop at the next safe point rather than at once.
//
// A preemptible cloud or a Slurm time limit sends SIGTERM and waits a while before SIGKILL; a user
// presses Ctrl-C; a dropped ssh session sends SIGHUP (and SIGPIPE to the writes into a pipe whose
// reader went with it, which are ignored while the handlers are installed). The first such signal only sets a
// flag (the handler is async-signal-safe: an atomic store and a write(2) to stderr); the training loop reads
// it between steps, saves a complete checkpoint and exits. A second signal exits at once (_exit(128 +
// signal)), as a user who presses Ctrl-C twice expects; that is as safe as a kill -9, which checkpoints
// survive.
#pragma once

#include <atomic>

namespace ferry {

class StopSignals {
 public:
  // Installs the handlers (one StopSignals at a time per process) and clears the flag.
  StopSignals();
  // Restores the handlers that were installed before.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGINT, SIGTERM or SIGHUP), or 0; set from the handler.
  const std::atomic<int>& received() const;
};

}  // namespace ferry
