#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
#include <span>

#include "core/byte_size.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "data/batch_sampler.h"
#include "data/packing.h"
#include "device/launch_env.h"
#include "engine/model_step.h"
#include "engine/step_batch.h"
#include "engine/unit_optimizer.h"
#include "io/atomic_file.h"
#include "io/replace_directory.h"
#include "io/scratch_file.h"
#include "model/model_weights.h"
#include "ops/ops.h"
#include "train/checkpoint.h"
#include "train/host_memory_watch.h"
#include "train/metrics_log.h"
#include "train/model_source.h"
#include "train/output_dir.h"
#include "train/output_dir_claim.h"
#include "train/output_space.h"
#include "train/progress.h"
#include "train/resolved_config.h"
#include "train/run_evaluation.h"
#include "train/run_report.h"
#include "train/run_summary.h"
#include "train/step_executor.h"
#include "train/tensorboard_log.h"
#include "train/training_data.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "train";

DType resolve_save_dtype(const TrainConfig& config, const ModelConfig& model) {
  return config.save_dtype.value_or(model.dtype);
}

// A packing the rows were made with: true/false as before best fit existed, so that older
// checkpoints still resume.
nlohmann::json packing_fingerprint(PackingMode mode) {
  if (mode == PackingMode::BestFit) return "best_fit";
  return mode == PackingMode::Split;
}

nlohmann::json run_fingerprint(const TrainConfig& c, size_t rows, const std::string& tokenized_data,
                               PackingMode packing) {
  nlohmann::json data = nlohmann::json::array();
  for (const auto& p : c.data) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    data.push_back({{"name", p.filename().string()}, {"bytes", ec ? -1 : static_cast<int64_t>(size)}});
  }
  // A key missing from an older checkpoint is not compared (check_resume_fingerprint).
  return {{"data", data},
          {"tokenized_data", tokenized_data},  // fingerprint of tokenizer + data + options (text formats)
          {"rows", rows},
          {"seq_len", c.seq_len},
          {"global_batch", c.global_batch},
          {"micro_batch", c.micro_batch},
          {"packing", packing_fingerprint(packing)},
          {"shuffle", c.shuffle},
          {"seed", c.seed},
          // The checkpoint holds the state in this format (a lean format's arrays, or fp32's).
          {"optimizer_state", state_format_name(c.optimizer_state)}};
}

void check_resume_fingerprint(const nlohmann::json& saved, const nlohmann::json& now,
                              const std::string& where) {
  for (const auto& [key, value] : now.items()) {
    if (!saved.contains(key)) continue;
    FERRY_CHECK(
        saved[key] == value, kWhere,
        "cannot resume exactly from {}: '{}' was {} when it was saved and is {} now; restore the setting{} "
        "or start a new output_dir",
        where, key, saved[key].dump(), value.dump(),
        // Runs saved before best-fit packing existed packed examples by splitting them.
        key == "packing" && saved[key] == true ? " (packing_strategy: split packs as it did)" : "");
  }
}

// "GPU 21.3 GiB, pinned 9.1 GiB, host 80.2 GiB" now, for the step line; empty when nothing is known.
std::string memory_now(const StepExecutor& executor) {
  std::string out;
  if (const auto d = executor.device_memory())
    out = fmt::format("GPU {}, pinned {}", format_bytes(d->device.in_use), format_bytes(d->pinned.in_use));
  if (const auto host = read_process_memory())
    out += fmt::format("{}host {}", out.empty() ? "" : ", ", format_bytes(host->counted()));
  return out;
}

// Before training: room on the output directory's disk for what the run will save (after the
// executor, whose disk tier may share that disk and has reserved its file by now).
void check_output_space(const TrainConfig& config, int64_t parameters, DType save_dtype,
                        OptimizerStateFormat format, int64_t total_steps, std::optional<uint64_t> free) {
  uint64_t replaced = 0;  // the weights of an earlier save of the model, which the final save replaces
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(config.output_dir, ec))
    if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec))
      replaced += entry.file_size(ec);
  const OutputWrites writes = output_writes(parameters, save_dtype, format, total_steps, config.save_steps,
                                            config.save_total_limit, config.save_best);
  std::string warning;
  const std::string problem =
      output_space_problem(free ? *free : free_disk_bytes(config.output_dir), replaced, writes, &warning);
  FERRY_CHECK(problem.empty(), kWhere, "output_dir {}: {}", config.output_dir.string(), problem);
  if (!warning.empty()) log_warn("output_dir {}: {}", config.output_dir.string(), warning);
}

// A stop requested by a signal is taken between steps; the steps done since the newest checkpoint
// are then saved, so that resume=true loses nothing.
void log_stop(int signal, int64_t step, int64_t total_steps, int64_t saved_step) {
  const char* name = signal == SIGINT    ? "SIGINT"
                     : signal == SIGTERM ? "SIGTERM"
                     : signal == SIGHUP  ? "SIGHUP"
                                         : "a signal";
  if (step == 0)
    log_warn("stopped by {} before the first step; nothing to save", name);
  else if (step == saved_step)
    log_warn("stopped by {} after step {} of {}, which the newest checkpoint holds", name, step, total_steps);
  else
    log_warn("stopped by {} after step {} of {}; saving a checkpoint", name, step, total_steps);
}

// RoPE is defined for every position, but a model knows those it was trained on (with the rope
// scaling its config.json names): a row position past max_position_embeddings would train on
// positions the model has never seen, silently. Packing restarts positions at each document (and
// at each part of one cut across rows), so only a document that long reaches them.
void check_positions(const std::vector<PackedRow>& rows, const ModelConfig& model) {
  int32_t furthest = 0;
  for (const PackedRow& row : rows)
    for (int32_t p : row.positions) furthest = std::max(furthest, p);
  FERRY_CHECK(furthest < model.max_position_embeddings, kWhere,
              "a document reaches position {}, but {} handles positions below {} (max_position_embeddings in "
              "config.json{}); lower seq_len to {}, or give the model a longer context in its config.json "
              "(max_position_embeddings, with the rope_scaling it was extended with)",
              furthest, model.architecture_name, model.max_position_embeddings,
              model.rope_scaling.type == RopeScaling::Type::Llama3 ? ", with llama3 rope scaling" : "",
              model.max_position_embeddings);
}

}  // namespace

TrainSummary run_training(const TrainConfig& config, const TrainHooks& hooks) {
  validate_train_config(config);
  // Under a launcher of several processes each would train alone into the same output_dir: say
  // what runs instead (docs/several_gpus.md, "Not built yet").
  const LaunchEnv job = launch_env();
  FERRY_CHECK(!job.distributed(), kWhere,
              "ferry train was started as rank {} of {} processes ({}); jobs of several processes are not "
              "supported yet: start one process and give it the host's devices with gpus: N (or gpus: auto)",
              job.rank, job.world_size, job.launcher);
  const auto run_began = std::chrono::steady_clock::now();  // the whole run's, loading included
  FERRY_CHECK(!config.model.empty(), kWhere,
              "no model given; set `model:` to a Hugging Face model directory (or preset:ARCH/NAME)");
  FERRY_CHECK(!config.data.empty(), kWhere, "no data given; set `data:` to one or more JSONL files");
  FERRY_CHECK(!config.output_dir.empty(), kWhere, "no output_dir given; set `output_dir:`");
  if (config.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(config.threads));
  // Before the claim, which may clear an earlier run's results (overwrite_output_dir).
  check_tokenizer_overrides(config.tokenizer, config.chat_template);
  const OutputDirLock output_lock = claim_output_dir(config);
  // The log lines go to train.log too (a resumed run's continue it), and the settings this run uses,
  // defaults included, to config.yaml: what a run did can be read back after the terminal is gone.
  const LogFile log_file(config.output_dir / kTrainLogFile, config.resume);
  // A resume's settings replace the saved ones only once its checkpoint has accepted them (below).
  if (!config.resume)
    write_file_atomic(config.output_dir / kResolvedConfigFile, resolved_config_yaml(config));
  warn_if_unfinished_output(config.model);

  // Host memory held to the plan phase by phase; the report is written however the run ends.
  HostMemoryWatch memory;
  const HostMemoryReportOnExit memory_report(memory, config.output_dir);
  memory.enter(kPhaseModelLoad);

  // Everything is read and checked before any long work starts.
  // Checked now, read unit by unit as the run's state takes them over (ModelWeights::deferred).
  ModelWeights weights = deferred_model_source_weights(config.model, config.seed);
  if (is_preset_model(config.model))
    log_warn("model {}: {}; the model directories this run writes say so", config.model.string(),
             weights.config.raw.value("ferry_random_init", std::string()));
  const ModelConfig& mc = weights.config;
  if (mc.sliding_window && *mc.sliding_window < config.seq_len) {
    fail(kWhere,
         "{} uses sliding-window attention of {} tokens, shorter than seq_len {}; ferry trains full "
         "attention only: set seq_len <= {}",
         mc.architecture_name, *mc.sliding_window, config.seq_len, *mc.sliding_window);
  }
  TrainingDataSummary data_summary;
  std::vector<Document> documents = load_training_documents(config, mc, &data_summary);
  if (data_summary.skipped_malformed > 0)
    log_warn("skipped {} malformed records (skip_malformed: true)", data_summary.skipped_malformed);
  FERRY_CHECK(!documents.empty(), kWhere, "the data holds no documents; check the files in `data:`");
  const std::vector<Document> eval_documents = evaluation_documents(config, mc, documents);
  const PackingMode packing = packing_mode(config, data_summary);
  const std::vector<PackedRow> rows = pack_documents(documents, config.seq_len, packing);
  check_positions(rows, mc);
  FERRY_CHECK(!rows.empty(), kWhere, "packing produced no sequences");
  check_global_batch(config.global_batch,
                     static_cast<int64_t>(rows.size()));  // before anything is sized by it

  const int64_t total_steps =
      config.max_steps > 0
          ? config.max_steps
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(config.epochs * static_cast<double>(rows.size()) /
                                                  static_cast<double>(config.global_batch))));
  const int64_t warmup =
      config.warmup_steps > 0
          ? config.warmup_steps
          : static_cast<int64_t>(std::ceil(config.warmup_ratio * static_cast<double>(total_steps)));
  const DType save_dtype = resolve_save_dtype(config, mc);

  const ModelConfig model_config = mc;
  const ModelLayout layout = weights.layout;
  const int64_t parameter_count = layout.parameter_count();
  // A resume takes every value of the state from the checkpoint: the model's weights are not
  // read (an 8B's 16 GB from its directory, or made for a preset); the masters start as zeros that
  // load_checkpoint overwrites whole, or the run stops with its error. The zeros are written on the
  // pool, as a load's values are: the first touch of an 8B's 32 GB of masters on one thread would
  // take longer than the read it saves.
  const std::optional<std::filesystem::path> latest =
      config.resume ? find_latest_checkpoint(config.output_dir) : std::nullopt;
  if (latest)
    weights.loader = [](size_t, std::span<float> out) {
      ThreadPool::global().parallel_for(
          out.size(), [out](size_t lo, size_t hi) { std::fill(out.begin() + lo, out.begin() + hi, 0.0f); },
          size_t{1} << 18);
    };
  memory.enter(kPhasePlanning);
  std::unique_ptr<StepExecutor> executor = make_step_executor(config, std::move(weights), &memory);
  memory.check();

  RunEvaluation evaluation(config, eval_documents.empty()
                                       ? std::vector<PackedRow>()
                                       : pack_documents(eval_documents, config.seq_len, packing));
  BatchSampler sampler(static_cast<int64_t>(rows.size()), config.seed, config.shuffle);
  const nlohmann::json fingerprint = run_fingerprint(config, rows.size(), data_summary.fingerprint, packing);
  int64_t step = 0;
  std::filesystem::create_directories(config.output_dir);
  if (config.resume) {
    if (!latest) {
      log_warn("resume: no complete checkpoint in {}; starting from the beginning",
               config.output_dir.string());
    } else {
      memory.enter(kPhaseCheckpointLoad);
      TrainerState state = is_exact(executor->state_format())
                               ? load_checkpoint(*latest, layout, executor->masters(), executor->exp_avg(),
                                                 executor->exp_avg_sq(), executor->streamed_state())
                               : load_checkpoint(*latest, layout, executor->state_format(),
                                                 executor->lean_state(), executor->streamed_state());
      check_resume_fingerprint(state.fingerprint, fingerprint, latest->string());
      step = state.step;
      FERRY_CHECK(
          step <= total_steps, kWhere,
          "{} is at step {}, past this run's {} steps; resume with max_steps of at least {} (or the epochs "
          "that train that long), or start a new output_dir",
          latest->string(), step, total_steps, step);
      executor->state_loaded(step);
      sampler.seek(DataPosition{state.data_epoch, state.data_index});
      log_info("resumed from {} at step {}", latest->string(), step);
    }
    write_file_atomic(config.output_dir / kResolvedConfigFile, resolved_config_yaml(config));
  }
  check_output_space(config, parameter_count, save_dtype, executor->state_format(), total_steps,
                     hooks.output_free_bytes);

  log_info("model {} ({} layers, hidden {}, {:.1f}M parameters, {})", model_config.architecture_name,
           model_config.num_layers, model_config.hidden_size, static_cast<double>(parameter_count) / 1e6,
           torch_dtype_name(model_config.dtype));
  log_info(
      "data: {} documents -> {} sequences of {} tokens ({}); {} steps of {} sequences (micro-batch {}), "
      "warmup {}",
      documents.size(), rows.size(), config.seq_len,
      packing == PackingMode::BestFit ? "best-fit packing"
      : packing == PackingMode::Split ? "split packing"
                                      : "no packing",
      total_steps, config.global_batch, executor->micro_batch(), warmup);
  log_info("device {}", executor->describe());
  // Evaluations run in batches of a step's rows (RunEvaluation::run below), through the same plan.
  EvaluationPlan evaluation_plan{
      evaluation.enabled(), config.eval_steps,
      executor->predicted_evaluation().seconds_for(evaluation.rows() * config.seq_len)};
  RunProgress progress(total_steps, step, executor->predicted_step_seconds(), evaluation_plan);
  if (evaluation.enabled() && evaluation_plan.predicted_seconds > 0)
    log_info("evaluation: {} sequences ({} tokens) {}, predicted {:.3g} s each (forward only)",
             evaluation.rows(), evaluation.rows() * config.seq_len,
             config.eval_steps > 0 ? fmt::format("every {} steps and at the end", config.eval_steps)
                                   : std::string("at the end"),
             evaluation_plan.predicted_seconds);
  if (!progress.eta_text().empty())
    log_info("{} for {} steps{}", progress.eta_text(), total_steps - step,
             progress.evaluations_left() > 0 ? fmt::format(" and {} evaluations", progress.evaluations_left())
                                             : std::string());
  const int64_t first_step = step;
  // A lean format changes the numbers: said on every run that uses one.
  if (!is_exact(config.optimizer_state))
    log_warn("{}: not torch's exact AdamW", describe_state_format(config.optimizer_state));

  auto checkpoint_view = [&]() {
    executor->finish_updates();
    CheckpointView view;
    view.config = &model_config;
    view.layout = &layout;
    view.source_dir = model_source_dir(config.model);
    view.save_dtype = save_dtype;
    view.max_shard_bytes = static_cast<size_t>(config.max_shard_bytes);
    for (float* b : executor->masters()) view.masters.push_back(b);
    for (float* b : executor->exp_avg()) view.m.push_back(b);
    for (float* b : executor->exp_avg_sq()) view.v.push_back(b);
    view.optimizer_state = executor->state_format();
    for (const auto& arrays : executor->lean_state()) {
      view.lean.emplace_back();
      for (std::span<std::byte> a : arrays) view.lean.back().push_back(a);
    }
    view.streamed = executor->streamed_state();
    const DataPosition pos = sampler.position();
    view.state = TrainerState{step, pos.epoch, pos.index, fingerprint};
    return view;
  };

  cut_metrics_after(config.output_dir / kMetricsFile, step);
  std::ofstream metrics(config.output_dir / kMetricsFile, std::ios::app);
  const std::unique_ptr<TensorBoardLog> tensorboard =
      config.report_to == ReportTo::TensorBoard
          ? std::make_unique<TensorBoardLog>(tensorboard_run_dir(config.output_dir))
          : nullptr;
  const auto run_start = std::chrono::steady_clock::now();
  const std::string device_description = executor->describe();
  AdamWHyper hyper;
  hyper.beta1 = config.adam_beta1;
  hyper.beta2 = config.adam_beta2;
  hyper.eps = config.adam_epsilon;
  hyper.weight_decay = config.weight_decay;

  TrainSummary summary;
  // report.html, written whenever the run ends: the curves of metrics.jsonl and these facts.
  auto write_report = [&](const std::string& ending) {
    double tokens = 0, seconds = 0;
    for (const StepRecord& r : summary.steps) tokens += static_cast<double>(r.tokens), seconds += r.seconds;
    std::vector<ReportFact> facts = {
        {"model", fmt::format("{} from {} ({:.1f}M parameters)", model_config.architecture_name,
                              config.model.string(), static_cast<double>(parameter_count) / 1e6)},
        {"device and plan", device_description},
        {"steps", fmt::format("{} of {}, {} sequences of {} tokens each; {}", step, total_steps,
                              config.global_batch, config.seq_len, ending)},
        {"time",
         fmt::format("{:.1f} s in this call; {:.0f} tokens/s over its {} steps", seconds_since(run_start),
                     seconds > 0 ? tokens / seconds : 0.0, summary.steps.size())}};
    if (!summary.steps.empty())
      facts.push_back({"last training loss", fmt::format("{:.4f}", summary.steps.back().loss)});
    if (evaluation.best_loss())
      facts.push_back({"best evaluation loss", fmt::format("{:.4f}", *evaluation.best_loss())});
    for (const std::string& line : memory.describe()) facts.push_back({"host memory", line});
    write_run_report(config.output_dir, "ferry run: " + config.output_dir.filename().string(), facts);
  };
  std::vector<const PackedRow*> step_rows;
  int64_t saved_step = step;  // the newest checkpoint's step
  while (step < total_steps) {
    if (const int signal = hooks.stop_signal ? hooks.stop_signal->load() : 0) {
      log_stop(signal, step, total_steps, saved_step);
      memory.enter(kPhaseCheckpointSave);
      if (step > saved_step)
        log_info("saved {}",
                 save_checkpoint(config.output_dir, checkpoint_view(), config.save_total_limit).string());
      summary.final_step = step;
      summary.stop_signal = signal;
      write_report("stopped by a signal");
      return summary;
    }
    const auto start = std::chrono::steady_clock::now();
    step_rows.clear();
    for (int64_t index : sampler.next_rows(config.global_batch))
      step_rows.push_back(&rows[static_cast<size_t>(index)]);
    const StepBatch batch = make_step_batch(step_rows, config.seq_len, executor->micro_batch());
    if (batch.counted_tokens() == 0)
      log_warn("step {}: every target is masked; the gradient is zero for this step", step + 1);
    hyper.lr =
        lr_at(config.lr_scheduler_type, config.learning_rate, step, warmup, total_steps, config.min_lr_ratio);
    memory.enter(summary.steps.empty() ? kPhaseFirstStep : kPhaseSteadyState);
    const ExecutedStep done = executor->step(step + 1, batch, hyper, config.max_grad_norm);
    ++step;
    memory.check();
    FERRY_CHECK(
        std::isfinite(done.loss) && std::isfinite(done.grad_norm), kWhere,
        "step {}: loss {} / grad norm {} is not finite; lower learning_rate or check the data (the last "
        "checkpoint is intact)",
        step, done.loss, done.grad_norm);

    StepRecord record;
    record.step = step;
    record.total_steps = total_steps;
    record.loss = done.loss;
    record.lr = hyper.lr;
    record.grad_norm = done.grad_norm;
    record.tokens = batch.rows * batch.seq_len;
    record.counted_tokens = done.counted_tokens;
    record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    summary.steps.push_back(record);
    if (hooks.on_step) hooks.on_step(record);
    progress.step_done(record.seconds);
    if (step % config.logging_steps == 0 || step == total_steps) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_began).count();
      const double epoch = static_cast<double>(step * config.global_batch) / static_cast<double>(rows.size());
      log_info(
          "step {}/{} | epoch {:.2f} | loss {:.4f} | lr {:.3e} | grad_norm {:.4f} | {:.0f} tok/s | {} "
          "elapsed, {} | {}",
          step, total_steps, epoch, record.loss, record.lr, record.grad_norm,
          static_cast<double>(record.tokens) / record.seconds, format_duration(elapsed), progress.eta_text(),
          memory_now(*executor));
    }
    metrics << nlohmann::json{{"step", step},
                              {"loss", record.loss},
                              {"lr", record.lr},
                              {"grad_norm", record.grad_norm},
                              {"tokens", record.tokens},
                              {"seconds", record.seconds}}
                   .dump()
            << "\n";
    metrics.flush();
    if (tensorboard)
      tensorboard->scalars(
          step, {{"train/loss", record.loss},
                 {"train/learning_rate", record.lr},
                 {"train/grad_norm", record.grad_norm},
                 {"train/tokens_per_second", static_cast<double>(record.tokens) / record.seconds}});

    const bool stop_early =
        hooks.stop_after_steps > 0 && step >= hooks.stop_after_steps && step < total_steps;
    if ((config.save_steps > 0 && (step % config.save_steps == 0 || step == total_steps)) || stop_early) {
      memory.enter(kPhaseCheckpointSave);
      const auto path = save_checkpoint(config.output_dir, checkpoint_view(), config.save_total_limit);
      log_info("saved {}", path.string());
      saved_step = step;
      memory.check();
      memory.enter(kPhaseSteadyState);
    }
    if (stop_early) {
      summary.final_step = step;
      return summary;
    }
    if (evaluation.due(step, total_steps)) {
      const EvalRecord e = evaluation.run(step, *executor, config.global_batch, executor->micro_batch());
      progress.evaluation_done(e.seconds);
      summary.evals.push_back(e);
      metrics << nlohmann::json{{"step", step},
                                {"eval_loss", e.loss},
                                {"eval_perplexity", e.perplexity},
                                {"eval_rows", e.rows},
                                {"eval_seconds", e.seconds}}
                     .dump()
              << "\n";
      metrics.flush();
      if (tensorboard) tensorboard->scalars(step, {{"eval/loss", e.loss}, {"eval/perplexity", e.perplexity}});
      if (e.best && config.save_best) {
        executor->finish_updates();
        // Written beside the previous best (best.tmp) and put in its place in one step, so that a
        // full disk or a kill keeps it (io/replace_directory.h).
        const std::filesystem::path best = config.output_dir / kBestModelDir;
        StagedDirectory staged(best);
        write_best_record(staged.path(), e);  // before the model's files, whose completion marker is last
        std::vector<const float*> masters;
        for (float* b : executor->masters()) masters.push_back(b);
        const StreamedState streamed = executor->streamed_state();
        write_final_model_dir(staged.path(), model_source_dir(config.model), model_config, layout, masters,
                              save_dtype, static_cast<size_t>(config.max_shard_bytes), config.tokenizer,
                              config.chat_template,
                              fmt::format("{} keeps the previous best model, if any; {}", best.string(),
                                          what_survives_a_failed_save(config.output_dir)),
                              streamed.masters, streamed.encoded);
        staged.replace();
        log_info("saved the best model so far (eval loss {:.4f}, step {}) to {}", e.loss, step,
                 best.string());
      }
      if (evaluation.patience_exhausted() && step < total_steps) {
        log_info("early stopping after step {}: {} evaluations without a loss below {:.4f}", step,
                 config.early_stopping_patience, *evaluation.best_loss());
        summary.stopped_early = true;
        break;
      }
    }
  }

  executor->finish_updates();
  memory.enter(kPhaseFinalSave);
  std::vector<const float*> masters;
  for (float* b : executor->masters()) masters.push_back(b);
  const StreamedState streamed = executor->streamed_state();
  write_final_model_dir(config.output_dir, model_source_dir(config.model), model_config, layout, masters,
                        save_dtype, static_cast<size_t>(config.max_shard_bytes), config.tokenizer,
                        config.chat_template, what_survives_a_failed_save(config.output_dir),
                        streamed.masters, streamed.encoded);
  log_info("wrote {} ({})", config.output_dir.string(), torch_dtype_name(save_dtype));
  memory.check();
  for (const std::string& line : memory.describe()) log_info("host memory, {}", line);
  RunEnd end;
  end.runtime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_began).count();
  end.steps = step - first_step;
  for (const StepRecord& r : summary.steps) {
    end.step_seconds += r.seconds;
    end.tokens += r.tokens;
  }
  end.predicted_step_seconds = executor->predicted_step_seconds();
  end.measured_step_seconds = progress.measured_step_seconds();
  end.cpu_adamw = executor->cpu_adamw_rates();
  if (!summary.steps.empty()) end.final_loss = summary.steps.back().loss;
  end.best_eval_loss = evaluation.best_loss();
  if (const auto d = executor->device_memory()) {
    end.peak_device_bytes = d->device.peak;
    end.peak_pinned_bytes = d->pinned.peak;
  }
  for (const HostMemoryPhase& phase : memory.phases())
    if (phase.samples > 0) end.peak_host_bytes = std::max(end.peak_host_bytes.value_or(0), phase.peak);
  end.model_dir = std::filesystem::absolute(config.output_dir);
  for (const std::string& line : describe_run_end(end)) log_info("{}", line);
  summary.final_step = step;
  summary.finished = true;
  write_report(summary.stopped_early ? "stopped early (early_stopping_patience)" : "finished");
  return summary;
}

}  // namespace ferry
