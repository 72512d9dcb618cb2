// The row sampler: reproducible shuffles, a permutation per epoch, and exact resume.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "data/batch_sampler.h"
#include "test_util.h"

namespace ferry {
namespace {

using Rows = std::vector<int64_t>;

Rows iota_rows(int64_t n) {
  Rows r(n);
  std::iota(r.begin(), r.end(), int64_t{0});
  return r;
}

TEST(BatchSampler, TheEngineIsTheStandardOne) {
  // The C++ standard fixes this value ([rand.predef]); if it held elsewhere, orders would differ.
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(BatchSampler, GoldenOrder) {
  // Pinned (and reproduced by an independent Python mt19937_64 + the documented Fisher–Yates): a
  // change here changes the data order of every run resumed across versions.
  EXPECT_EQ(BatchSampler::epoch_order(10, 1234, 0), (Rows{0, 3, 4, 7, 9, 8, 5, 6, 1, 2}));
  EXPECT_EQ(BatchSampler::epoch_order(10, 1234, 1), (Rows{9, 8, 0, 4, 6, 5, 1, 2, 7, 3}));
  // Epoch e is seeded with seed + e.
  EXPECT_EQ(BatchSampler::epoch_order(10, 1235, 0), BatchSampler::epoch_order(10, 1234, 1));
}

TEST(BatchSampler, DeterministicGivenTheSeed) {
  BatchSampler a(37, 7), b(37, 7), c(37, 8);
  Rows ra, rb, rc;
  for (int batch = 0; batch < 4; ++batch) {  // 100 rows, across epochs
    for (auto [sampler, rows] : {std::pair{&a, &ra}, {&b, &rb}, {&c, &rc}}) {
      const Rows r = sampler->next_rows(25);
      rows->insert(rows->end(), r.begin(), r.end());
    }
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

TEST(BatchSampler, EachEpochIsAFreshPermutation) {
  const int64_t n = 50;
  BatchSampler sampler(n, 42);
  Rows previous;
  for (int epoch = 0; epoch < 4; ++epoch) {
    Rows rows = sampler.next_rows(n);
    EXPECT_EQ(rows, BatchSampler::epoch_order(n, 42, epoch));
    EXPECT_NE(rows, previous);
    EXPECT_NE(rows, iota_rows(n));
    previous = rows;
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(rows, iota_rows(n)) << "epoch " << epoch;
    EXPECT_EQ(sampler.position(), (DataPosition{epoch + 1, 0}));
  }
}

TEST(BatchSampler, BatchesCrossEpochBoundaries) {
  BatchSampler sampler(10, 5);
  const Rows e0 = BatchSampler::epoch_order(10, 5, 0), e1 = BatchSampler::epoch_order(10, 5, 1);
  EXPECT_EQ(sampler.next_rows(7), Rows(e0.begin(), e0.begin() + 7));
  EXPECT_EQ(sampler.position(), (DataPosition{0, 7}));
  Rows expected(e0.begin() + 7, e0.end());
  expected.insert(expected.end(), e1.begin(), e1.begin() + 4);
  EXPECT_EQ(sampler.next_rows(7), expected);
  EXPECT_EQ(sampler.position(), (DataPosition{1, 4}));
  // A batch of the whole dataset spans two epochs from the middle of one.
  EXPECT_EQ(sampler.next_rows(10).size(), 10u);
  EXPECT_EQ(sampler.position(), (DataPosition{2, 4}));
  EXPECT_TRUE(sampler.next_rows(0).empty());
}

// A step larger than the data would hold some rows several times in every step (and epochs would
// count no whole passes): refused with the data's row count, before anything is sized by it. A
// global_batch of 10^6 on 10 rows grew memory until std::bad_alloc.
TEST(BatchSampler, ABatchLargerThanTheDataIsRefused) {
  EXPECT_TRUE(test::throws_with([] { check_global_batch(1000000, 10); },
                                {"global_batch is 1000000 sequences", "more than the 10 the data packs into",
                                 "lower global_batch to at most 10"}));
  EXPECT_NO_THROW(check_global_batch(10, 10));
  BatchSampler sampler(10, 5);
  EXPECT_TRUE(test::throws_with([&] { sampler.next_rows(11); }, {"global_batch is 11", "at most 10"}));
  EXPECT_TRUE(test::throws_with([&] { sampler.next_rows(int64_t{1} << 40); }, {"at most 10"}));
  EXPECT_EQ(sampler.position(), (DataPosition{0, 0}));  // nothing drawn
}

TEST(BatchSampler, ResumeEqualsAnUninterruptedRun) {
  const int64_t n = 10, batch = 3;
  BatchSampler straight(n, 99);
  Rows expected;
  for (int i = 0; i < 12; ++i) {
    const Rows r = straight.next_rows(batch);
    expected.insert(expected.end(), r.begin(), r.end());
  }
  // Stop after every possible number of batches (including mid-epoch and right at a boundary).
  for (int stop = 0; stop <= 12; ++stop) {
    BatchSampler first(n, 99);
    Rows got;
    for (int i = 0; i < stop; ++i) {
      const Rows r = first.next_rows(batch);
      got.insert(got.end(), r.begin(), r.end());
    }
    // Through a checkpoint's JSON text, into a new sampler.
    const std::string saved = nlohmann::json(first.position()).dump();
    BatchSampler resumed(n, 99);
    resumed.seek(nlohmann::json::parse(saved).get<DataPosition>());
    for (int i = stop; i < 12; ++i) {
      const Rows r = resumed.next_rows(batch);
      got.insert(got.end(), r.begin(), r.end());
    }
    EXPECT_EQ(got, expected) << "stopped after " << stop << " batches";
  }
}

TEST(BatchSampler, SeekToTheEndOfAnEpochIsTheStartOfTheNext) {
  BatchSampler a(6, 1), b(6, 1);
  a.seek({2, 6});
  EXPECT_EQ(a.position(), (DataPosition{3, 0}));
  b.seek({3, 0});
  EXPECT_EQ(a.next_rows(6), b.next_rows(6));
  // Seeking back to an earlier epoch works too.
  a.seek({0, 2});
  const Rows e0 = BatchSampler::epoch_order(6, 1, 0);
  EXPECT_EQ(a.next_rows(2), Rows(e0.begin() + 2, e0.begin() + 4));
}

TEST(BatchSampler, WithoutShuffleRowsComeInOrder) {
  BatchSampler sampler(4, 123, /*shuffle=*/false);
  EXPECT_EQ(sampler.next_rows(3), (Rows{0, 1, 2}));
  EXPECT_EQ(sampler.next_rows(3), (Rows{3, 0, 1}));
}

TEST(BatchSampler, ShufflesAreUnbiased) {
  // All 6 orders of 3 rows, over 6000 seeds: each should appear ~1000 times (sd ~ 29).
  std::map<Rows, int> counts;
  for (uint64_t seed = 0; seed < 6000; ++seed) ++counts[BatchSampler::epoch_order(3, seed * 7919, 0)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [order, count] : counts) EXPECT_NEAR(count, 1000, 150);
}

TEST(BatchSampler, BadPositionsAndSizesAreErrors) {
  BatchSampler sampler(10, 0);
  try {
    sampler.seek({0, 11});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[data] cannot resume at epoch 0, row 11: the dataset has 10 rows; was the checkpoint made "
                 "with other data or another seq_len?");
  }
  EXPECT_THROW(sampler.seek({-1, 0}), Error);
  EXPECT_THROW(BatchSampler(0, 1), Error);
  EXPECT_THROW(nlohmann::json::parse(R"({"epoch": 1})").get<DataPosition>(), Error);
  EXPECT_THROW(nlohmann::json::parse(R"({"epoch": 1, "index": -3})").get<DataPosition>(), Error);
  EXPECT_THROW(nlohmann::json::parse(R"({"epoch": "1", "index": 0})").get<DataPosition>(), Error);
  EXPECT_THROW(nlohmann::json::parse("[1, 2]").get<DataPosition>(), Error);
  EXPECT_EQ(nlohmann::json(DataPosition{3, 17}).dump(), R"({"epoch":3,"index":17})");
}

}  // namespace
}  // namespace ferry
