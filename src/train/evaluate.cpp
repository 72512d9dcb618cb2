#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "data/packing.h"
#include "engine/model_step.h"
#include "engine/step_batch.h"
#include "io/safetensors_writer.h"
#include "model/model_weights.h"
#include "train/device_choice.h"
#include "train/output_dir_claim.h"
#include "train/profile_cache.h"
#include "train/step_executor.h"
#include "train/training_data.h"

namespace ferry {

const char* packing_mode_name(PackingMode mode) {
  switch (mode) {
    case PackingMode::BestFit:
      return "best_fit";
    case PackingMode::Split:
      return "split";
    case PackingMode::None:
      return "none";
  }
  return "?";
}

namespace {

// The command line's counts, each refused by its flag before anything is read: a negative
// --max-rows or --dump-rows was taken for "all" and "none".
void check_options(const EvalOptions& o) {
  FERRY_CHECK(!o.model.empty() && !o.data.empty(), "eval", "give --model DIR and --data FILE");
  // As train's seq_len: a row's positions are int32.
  FERRY_CHECK(o.seq_len >= 2 && o.seq_len <= std::numeric_limits<int32_t>::max(), "eval",
              "--seq-len must be between 2 and {} tokens, got {}", std::numeric_limits<int32_t>::max(),
              o.seq_len);
  FERRY_CHECK(o.micro_batch >= 1, "eval", "--micro-batch must be at least 1 sequence, got {}", o.micro_batch);
  FERRY_CHECK(o.max_rows >= 0, "eval", "--max-rows must be 0 (all rows) or a number of rows, got {}",
              o.max_rows);
  FERRY_CHECK(o.dump_rows >= 0, "eval", "--dump-rows must be 0 or a number of rows to dump, got {}",
              o.dump_rows);
  FERRY_CHECK(o.threads >= 0, "eval", "--threads must be 0 (all cores) or a number of threads, got {}",
              o.threads);
}

// a x b elements (tokens, logits) of a buffer, or an error naming the flags that make it.
int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t product = 0;
  FERRY_CHECK(!__builtin_mul_overflow(a, b, &product), "eval", "{} ({} x {}) is too large; lower them", what,
              a, b);
  return product;
}

}  // namespace

EvalResult run_eval(const EvalOptions& o) {
  check_options(o);
  if (o.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(o.threads));
  warn_if_unfinished_output(o.model);
  ModelWeights w = load_model_weights(o.model);
  // The documents exactly as training would see them, through the same loader and cache.
  TrainConfig data;
  data.model = o.model;
  data.data = o.data;
  const std::optional<DataFormat> format = parse_data_format(o.data_format);
  FERRY_CHECK(format.has_value(), "eval", "--data-format must be one of {}; got '{}'", data_format_names(),
              o.data_format);
  data.data_format = *format;
  data.tokenizer = o.tokenizer;
  data.chat_template = o.chat_template;
  data.train_on_prompt = o.train_on_prompt;
  data.cache_dir = o.cache_dir.empty() ? default_cache_dir("data") : o.cache_dir;
  if (data.cache_dir.empty()) data.output_dir = ".";  // no cache root known: the working directory's .cache
  // Packed as training packs the same data (train/training_data.h packing_mode); the strategy is
  // parsed as train's key is, so a bad value gets train's message.
  const TrainConfig packing = parse_train_config(
      "", {"packing=" + std::string(o.packing ? "true" : "false"), "packing_strategy=" + o.packing_strategy},
      "eval");
  data.packing = packing.packing;
  data.packing_strategy = packing.packing_strategy;
  TrainingDataSummary summary;
  const std::vector<Document> documents = load_training_documents(data, w.config, &summary);
  const PackingMode mode = packing_mode(data, summary);
  std::vector<PackedRow> rows = pack_documents(documents, o.seq_len, mode);
  log_info("eval: {} documents -> {} sequences of {} tokens ({} packing)", documents.size(), rows.size(),
           o.seq_len, packing_mode_name(mode));
  if (o.max_rows > 0 && static_cast<int64_t>(rows.size()) > o.max_rows)
    rows.resize(static_cast<size_t>(o.max_rows));
  FERRY_CHECK(!rows.empty(), "eval", "the data holds no tokens");
  // A micro-batch of more sequences than the data has would only be padding: at most the rows,
  // which loses nothing and keeps its buffers (micro_batch x seq_len tokens) the data's size.
  const int64_t micro_batch = std::min<int64_t>(o.micro_batch, static_cast<int64_t>(rows.size()));
  const int64_t chunk_tokens = checked_product(micro_batch, o.seq_len, "--micro-batch x --seq-len tokens");

  // The device and plan a training run of this shape would get; eight micro-chunks a batch at most,
  // so that each streamed layer's weights cross PCIe once for several.
  TrainConfig run = parse_train_config("", {"device=" + o.device, "gpu_memory=" + o.gpu_memory}, "eval");
  // micro_batch <= rows: the rounding up cannot overflow.
  const int64_t chunks =
      std::clamp<int64_t>((static_cast<int64_t>(rows.size()) + micro_batch - 1) / micro_batch, 1, 8);
  run.model = o.model;
  run.seq_len = o.seq_len;
  run.micro_batch = micro_batch;
  run.global_batch = micro_batch * chunks;
  run.max_grad_norm = 0;
  const bool reference =
      o.dump_logits.empty() ? choose_device(run, DeviceUse::Train).kind == DeviceKind::Cpu : true;
  if (!reference) {
    const std::unique_ptr<StepExecutor> executor = make_step_executor(run, std::move(w));
    log_info("eval on {}", executor->describe());
    EvalResult result;
    result.packing = mode;
    double loss_sum = 0.0;
    const PackedRow padding = padding_row(o.seq_len);  // fills a last micro-chunk, counts nothing
    std::vector<const PackedRow*> batch_rows;
    for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(run.global_batch)) {
      batch_rows.clear();
      for (size_t r = begin; r < std::min(rows.size(), begin + static_cast<size_t>(run.global_batch)); ++r)
        batch_rows.push_back(&rows[r]);
      while (batch_rows.size() % static_cast<size_t>(executor->micro_batch()) != 0)
        batch_rows.push_back(&padding);
      const StepLoss loss =
          executor->evaluate(make_step_batch(batch_rows, o.seq_len, executor->micro_batch()));
      loss_sum += loss.loss_sum;
      result.counted_tokens += loss.counted_tokens;
    }
    result.rows = static_cast<int64_t>(rows.size());
    FERRY_CHECK(result.counted_tokens > 0, "eval", "every target in the data is masked; nothing to evaluate");
    result.loss = loss_sum / static_cast<double>(result.counted_tokens);
    result.perplexity = std::exp(result.loss);
    return result;
  }

  auto ops = make_cpu_ops();
  ModelStep step(w.config, w.layout, *ops, chunk_tokens, 1);
  std::vector<float*> params;
  for (auto& u : w.units) params.push_back(u.data());

  EvalResult result;
  result.packing = mode;
  double loss_sum = 0.0;
  const int64_t V = w.config.vocab_size;
  std::vector<float> dumped;
  const int64_t dump_rows =
      o.dump_logits.empty() ? 0 : std::min<int64_t>(o.dump_rows, static_cast<int64_t>(rows.size()));
  for (size_t begin = 0; begin < rows.size(); begin += static_cast<size_t>(micro_batch)) {
    std::vector<const PackedRow*> batch_rows;
    for (size_t r = begin; r < std::min(rows.size(), begin + static_cast<size_t>(micro_batch)); ++r)
      batch_rows.push_back(&rows[r]);
    const StepBatch batch = make_step_batch(batch_rows, o.seq_len, static_cast<int64_t>(batch_rows.size()));
    std::vector<float> logits;
    const bool dump = static_cast<int64_t>(begin) < dump_rows;
    // batch.rows x seq_len <= chunk_tokens, checked above.
    if (dump)
      logits.resize(static_cast<size_t>(checked_product(batch.rows * o.seq_len, V, "logits to dump")));
    const StepLoss loss = step.evaluate(params, batch, dump ? logits.data() : nullptr);
    if (dump) dumped.insert(dumped.end(), logits.begin(), logits.end());
    loss_sum += loss.loss_sum;
    result.counted_tokens += loss.counted_tokens;
  }
  result.rows = static_cast<int64_t>(rows.size());
  FERRY_CHECK(result.counted_tokens > 0, "eval", "every target in the data is masked; nothing to evaluate");
  result.loss = loss_sum / static_cast<double>(result.counted_tokens);
  result.perplexity = std::exp(result.loss);

  if (dump_rows > 0) {
    std::vector<int64_t> ids, positions;
    for (int64_t r = 0; r < dump_rows; ++r) {
      for (int32_t t : rows[static_cast<size_t>(r)].input_ids) ids.push_back(t);
      for (int32_t t : rows[static_cast<size_t>(r)].positions) positions.push_back(t);
    }
    dumped.resize(static_cast<size_t>(checked_product(dump_rows * o.seq_len, V, "logits to dump")));
    write_safetensors(o.dump_logits, {{"input_ids", DType::I64, {dump_rows, o.seq_len}, ids.data()},
                                      {"position_ids", DType::I64, {dump_rows, o.seq_len}, positions.data()},
                                      {"logits", DType::F32, {dump_rows, o.seq_len, V}, dumped.data()}});
  }
  return result;
}

}  // namespace ferry
