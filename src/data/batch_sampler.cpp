#include "data/batch_sampler.h"

#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <utility>

#include "core/error.h"
#include "core/json_text.h"

namespace ferry {

namespace {

// A uniform draw from [0, bound) by rejection: the accepted draws, [2^64 mod bound, 2^64), are a
// whole number of copies of [0, bound) modulo bound, so no value is favoured.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound, in unsigned arithmetic
  for (;;) {
    const uint64_t draw = rng();
    if (draw >= threshold) return draw % bound;
  }
}

}  // namespace

void to_json(nlohmann::json& out, const DataPosition& position) {
  out = nlohmann::json{{"epoch", position.epoch}, {"index", position.index}};
}

void from_json(const nlohmann::json& in, DataPosition& position) {
  FERRY_CHECK(in.is_object(), "data",
              "data position is {}; expected an object like {{\"epoch\": 0, \"index\": 0}}",
              json_excerpt(in));
  for (const char* key : {"epoch", "index"}) {
    const auto it = in.find(key);
    FERRY_CHECK(it != in.end(), "data", "data position {} has no '{}'; the checkpoint is incomplete",
                json_excerpt(in), key);
    FERRY_CHECK(it->is_number_integer() && it->get<int64_t>() >= 0, "data",
                "data position's '{}' is {}; expected a non-negative integer", key, json_excerpt(*it));
  }
  position.epoch = in.at("epoch").get<int64_t>();
  position.index = in.at("index").get<int64_t>();
}

void check_global_batch(int64_t global_batch, int64_t num_rows) {
  FERRY_CHECK(global_batch <= num_rows, "data",
              "global_batch is {} sequences, more than the {} the data packs into: every step would repeat "
              "sequences; lower global_batch to at most {}, or give more data",
              global_batch, num_rows, num_rows);
}

BatchSampler::BatchSampler(int64_t num_rows, uint64_t seed, bool shuffle)
    : num_rows_(num_rows), seed_(seed), shuffle_(shuffle) {
  FERRY_CHECK(num_rows >= 1, "data", "the dataset has {} rows; there is nothing to train on", num_rows);
  enter_epoch(0);
}

std::vector<int64_t> BatchSampler::epoch_order(int64_t num_rows, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(num_rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  std::mt19937_64 rng(seed + static_cast<uint64_t>(epoch));
  for (size_t i = order.size(); i-- > 1;) {
    const size_t j = static_cast<size_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

void BatchSampler::enter_epoch(int64_t epoch) {
  position_ = {epoch, 0};
  order_ = epoch_order(num_rows_, seed_, epoch, shuffle_);
}

std::vector<int64_t> BatchSampler::next_rows(int64_t count) {
  FERRY_ASSERT(count >= 0);
  // Bounded by the data: the reserve below is never larger than the dataset's order.
  check_global_batch(count, num_rows_);
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(rows.size()) < count) {
    const int64_t take = std::min(count - static_cast<int64_t>(rows.size()), num_rows_ - position_.index);
    rows.insert(rows.end(), order_.begin() + position_.index, order_.begin() + position_.index + take);
    position_.index += take;
    if (position_.index == num_rows_) enter_epoch(position_.epoch + 1);
  }
  return rows;
}

void BatchSampler::seek(const DataPosition& position) {
  FERRY_CHECK(
      position.epoch >= 0 && position.index >= 0 && position.index <= num_rows_, "data",
      "cannot resume at epoch {}, row {}: the dataset has {} rows; was the checkpoint made with other "
      "data or another seq_len?",
      position.epoch, position.index, num_rows_);
  if (position.index == num_rows_) {
    enter_epoch(position.epoch + 1);
    return;
  }
  if (position.epoch != position_.epoch) enter_epoch(position.epoch);
  position_ = position;
}

}  // namespace ferry
