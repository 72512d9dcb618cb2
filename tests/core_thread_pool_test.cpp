#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace ferry {
namespace {

TEST(ThreadPool, CoversRangeOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(hits.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, EveryPieceRunsOnceWhenOneThreadIsSlow) {
  // The thread that takes piece 0 holds it until every other piece is done: the other threads
  // take all the rest from the shared counter (a static slice per thread would leave the slow
  // thread's slice waiting, and this would never finish).
  ThreadPool pool(4);
  const size_t pieces = 200;
  std::vector<std::atomic<int>> hits(pieces);
  std::atomic<size_t> done{0};
  pool.for_each_piece(pieces, [&](size_t k) {
    if (k == 0) {
      while (done.load() < pieces - 1) std::this_thread::yield();
    }
    hits[k]++;
    done++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(done.load(), pieces);
}

TEST(ThreadPool, PiecesRunOnTheCallerWithoutWorkers) {
  ThreadPool pool(1);
  std::vector<size_t> order;
  pool.for_each_piece(5, [&](size_t k) { order.push_back(k); });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
  pool.for_each_piece(0, [&](size_t) { FAIL() << "no pieces, no calls"; });
}

TEST(ThreadPool, CarriesWorkerErrorsToCaller) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.run_on_all([](size_t piece, size_t) {
    if (piece == 2) throw Error("boom");
  }),
               Error);
  // The pool still works afterwards.
  std::atomic<int> n{0};
  pool.run_on_all([&](size_t, size_t) { n++; });
  EXPECT_EQ(n.load(), 4);
}

// For the child process of a death test: allows the process's user at most `processes` processes
// and threads, as `ulimit -u` or a container's pids limit would. Root is exempt from the limit, so
// the child first becomes nobody.
void limit_processes(rlim_t processes) {
  if (geteuid() == 0 && setuid(65534) != 0) std::_Exit(3);
  const rlimit limit{processes, processes};
  if (setrlimit(RLIMIT_NPROC, &limit) != 0) std::_Exit(4);
}

// Runs `make_pool` in a child limited to a few processes; the child exits 0 when it threw a
// ferry::Error (printed for the death test's regex), 1 when it did not.
template <typename MakePool>
[[noreturn]] void expect_error_in_limited_child(rlim_t processes, MakePool make_pool) {
  limit_processes(processes);
  try {
    make_pool();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(0);
  }
  std::_Exit(1);
}

// A count the process may not start is an error naming the count that worked, never a hang or an
// abort from joinable threads left behind; the threads started before the failure are joined.
TEST(ThreadPoolLimits, ACountThatCannotStartIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(expect_error_in_limited_child(4, [] { ThreadPool pool(64); }), testing::ExitedWithCode(0),
              "\\[threads\\] could not start thread [0-9]+ of the 64 asked for.*set threads to at most");
  EXPECT_EXIT(expect_error_in_limited_child(1, [] { ThreadPool pool(100000); }), testing::ExitedWithCode(0),
              "could not start thread 2 of the 100000 asked for.*at most 1,");
}

// The default (one per core) takes what the limit allows and still works.
TEST(ThreadPoolLimits, TheDefaultCountShrinksToWhatCanStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        limit_processes(1);
        ThreadPool pool(0);
        std::atomic<size_t> sum{0};
        pool.parallel_for(1000, [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) sum += i;
        });
        std::_Exit(pool.size() == 1 && sum == 999 * 1000 / 2 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ferry
