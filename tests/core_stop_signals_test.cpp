// SIGINT/SIGTERM/SIGHUP handlers: the first signal only sets the flag; a second one exits at once with
// 128 + signal; leaving the scope restores the handlers that were there before.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "core/stop_signals.h"

namespace ferry {
namespace {

sighandler_t current_handler(int signal) {
  struct sigaction now {};
  sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

TEST(StopSignalsTest, TheFirstSignalOnlySetsTheFlag) {
  StopSignals signals;
  EXPECT_EQ(signals.received().load(), 0);
  raise(SIGTERM);  // delivered to this thread before raise returns
  EXPECT_EQ(signals.received().load(), SIGTERM);
}

TEST(StopSignalsTest, AHangupAsksForAStopAndAClosedPipeDoesNotEndTheRun) {
  StopSignals signals;
  raise(SIGHUP);  // the ssh session went away
  EXPECT_EQ(signals.received().load(), SIGHUP);
  EXPECT_EQ(current_handler(SIGPIPE), SIG_IGN);
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  close(pipe_ends[0]);  // `| tee log` went with it
  errno = 0;
  EXPECT_EQ(write(pipe_ends[1], "x", 1), -1);  // reached: no SIGPIPE ended the process
  EXPECT_EQ(errno, EPIPE);
  close(pipe_ends[1]);
}

TEST(StopSignalsTest, ASecondSignalExitsAtOnce) {
  EXPECT_EXIT(
      {
        StopSignals signals;
        raise(SIGINT);
        raise(SIGINT);
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(128 + SIGINT), "second signal: exiting at once");
}

TEST(StopSignalsTest, TheEarlierHandlersComeBack) {
  const sighandler_t before = current_handler(SIGTERM), pipe_before = current_handler(SIGPIPE);
  {
    StopSignals signals;
    EXPECT_NE(current_handler(SIGTERM), before);
    EXPECT_NE(current_handler(SIGINT), before);
    EXPECT_NE(current_handler(SIGHUP), before);
  }
  EXPECT_EQ(current_handler(SIGTERM), before);
  EXPECT_EQ(current_handler(SIGHUP), before);
  EXPECT_EQ(current_handler(SIGPIPE), pipe_before);
  StopSignals again;  // and the flag starts clear
  EXPECT_EQ(again.received().load(), 0);
}

}  // namespace
}  // namespace ferry
