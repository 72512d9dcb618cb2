// TensorBoard event files (`report_to: tensorboard`): the run's scalars -- train/loss,
// train/learning_rate, train/grad_norm, train/tokens_per_second, eval/loss, eval/perplexity -- in
// output_dir/runs/<start time>_<host>/events.out.tfevents.*, the layout transformers' Trainer
// writes and that TensorBoard, and W&B and MLflow through their TensorBoard sync, read.
//
// The format, written here without TensorFlow: a file of records, each
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data
// (little-endian), whose data is a serialized tensorflow.Event protocol buffer: the first one
// names the file version ("brain.Event:2"), each later one holds a step's Summary of simple values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry {

// CRC-32C (Castagnoli), as TFRecord uses it; masked as TFRecord stores it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardLog {
 public:
  // Creates `run_dir` and a new event file in it; throws ferry::Error when it cannot.
  explicit TensorBoardLog(const std::filesystem::path& run_dir);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  // One event of `step` with these (tag, value) scalars, flushed so that a live TensorBoard sees it.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// output_dir/runs/<YYYYmmdd-HHMMSS>_<host>: a new folder for each start, as transformers makes.
std::filesystem::path tensorboard_run_dir(const std::filesystem::path& output_dir);

}  // namespace ferry
