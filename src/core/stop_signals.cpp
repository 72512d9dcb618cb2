#include "core/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <iterator>

#include "core/check.h"

namespace ferry {

namespace {

// Static storage: the handler may touch nothing else. Lock-free, so that storing from a handler
// is async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);

// The signals that ask for a stop: Ctrl-C, a scheduler's or a preemption's TERM, and the hangup
// of a terminal or ssh session that went away.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
bool g_installed = false;
struct sigaction g_previous[std::size(kStopSignals)]{};
struct sigaction g_previous_pipe {};

void write_stderr(const char* text, size_t length) {
  // Best effort: there is nothing to do in a handler when stderr is gone.
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, length);
}

extern "C" void on_stop_signal(int signal) {
  const int saved_errno = errno;
  int none = 0;
  // One winner even when two threads take the two signals at the same moment.
  if (g_received.compare_exchange_strong(none, signal)) {
    static const char kFirst[] =
        "\nferry: stopping after the current step to save a checkpoint; send the signal again to exit at "
        "once\n";
    write_stderr(kFirst, sizeof kFirst - 1);
    errno = saved_errno;
    return;
  }
  static const char kSecond[] = "\nferry: second signal: exiting at once without saving\n";
  write_stderr(kSecond, sizeof kSecond - 1);
  ::_exit(128 + signal);
}

}  // namespace

StopSignals::StopSignals() {
  FERRY_ASSERT(!g_installed, "one StopSignals at a time");
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  // Restart interrupted system calls (reads, writes, waits) instead of failing them with EINTR:
  // the run continues until the loop looks at the flag.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : kStopSignals) sigaddset(&action.sa_mask, signal);
  for (size_t i = 0; i < std::size(kStopSignals); ++i)
    FERRY_ASSERT(::sigaction(kStopSignals[i], &action, &g_previous[i]) == 0,
                 "sigaction with valid arguments cannot fail");
  // A hangup often takes the reader of ferry's output with it (`ferry train | tee log`): writing
  // to the closed pipe must fail quietly, not end the run before the checkpoint it is saving.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  FERRY_ASSERT(::sigaction(SIGPIPE, &ignore, &g_previous_pipe) == 0,
               "sigaction with valid arguments cannot fail");
  g_installed = true;
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kStopSignals); ++i) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
  ::sigaction(SIGPIPE, &g_previous_pipe, nullptr);
  g_installed = false;
}

const std::atomic<int>& StopSignals::received() const {
  return g_received;
}

}  // namespace ferry
