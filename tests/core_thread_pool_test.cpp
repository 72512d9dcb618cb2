#include <atomic>
#include <numeric>

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

}  // namespace
}  // namespace ferry
