#include "train/demo.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "generate/generator.h"
#include "ops/device_ops.h"
#include "train/model_init.h"
#include "train/trainer.h"

namespace ferry {

namespace {

// Byte vocabulary: ids 0..255 are bytes; 256 begins a document, 257 ends one.
constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;
constexpr int kMinLength = 3;
constexpr int kMaxLength = 6;

struct Example {
  std::string text;  // the string to reverse
  std::vector<int32_t> prompt() const {
    std::vector<int32_t> ids{kBos};
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    ids.push_back('=');
    return ids;
  }
  std::vector<int32_t> answer() const {
    std::vector<int32_t> ids;
    for (auto it = text.rbegin(); it != text.rend(); ++it) ids.push_back(static_cast<unsigned char>(*it));
    ids.push_back(kEos);
    return ids;
  }
};

Example random_example(std::mt19937_64& rng) {
  const int length = kMinLength + static_cast<int>(rng() % (kMaxLength - kMinLength + 1));
  Example e;
  for (int i = 0; i < length; ++i) e.text.push_back(static_cast<char>('a' + rng() % 10));
  return e;
}

ModelConfig demo_model_config() {
  ModelConfig c = preset_config("llama", "tiny");
  nlohmann::json json = c.raw;
  json["hidden_size"] = 128;
  json["intermediate_size"] = 352;
  json["num_hidden_layers"] = 3;
  json["num_attention_heads"] = 4;
  json["num_key_value_heads"] = 2;
  json["max_position_embeddings"] = 256;
  json["bos_token_id"] = kBos;
  json["eos_token_id"] = kEos;
  return parse_model_config(json, "demo model");
}

// Greedy decoding of each prompt with the generator `ferry generate` uses (KV cache, stop at EOS);
// exact match of the whole answer (EOS included).
double exact_match(const std::filesystem::path& model_dir, const std::vector<Example>& examples, bool show) {
  SimDeviceOptions options;
  options.require_pinned_host = false;
  auto device = make_sim_device(options);
  auto ops = make_device_ops(*device);
  const ResidentModel model = ResidentModel::load(*device, model_dir, DType::F32);
  CachedDecoder decoder(model, *device, *ops, 2 + 2 * kMaxLength + 1);
  Generator generator(decoder, {kEos});
  Sampler greedy(SamplingOptions{});

  int64_t correct = 0;
  for (size_t n = 0; n < examples.size(); ++n) {
    const std::vector<int32_t> expected = examples[n].answer();
    const GenerationResult r =
        generator.generate(examples[n].prompt(), greedy, static_cast<int64_t>(expected.size()));
    std::vector<int32_t> produced = r.tokens;
    if (r.finish == FinishReason::Stop) produced.push_back(kEos);
    correct += (produced == expected);
    if (show && n < 4) {
      std::string out;
      for (int32_t t : produced) {
        if (t == kEos)
          out += "<eos>";
        else if (t >= 32 && t < 127)
          out += static_cast<char>(t);
        else
          out += fmt::format("<{}>", t);
      }
      log_info("  {} = {}", examples[n].text, out);
    }
  }
  return static_cast<double>(correct) / static_cast<double>(examples.size());
}

// The demo rewrites these in its directory; anything else there is not its to overwrite.
constexpr const char* kDemoEntries[] = {"base-model", "finetuned", "train.jsonl"};

void check_demo_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return;
  FERRY_CHECK(std::filesystem::is_directory(dir, ec), "demo", "--out {} is a file; give a directory",
              dir.string());
  std::vector<std::string> others;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::find(std::begin(kDemoEntries), std::end(kDemoEntries), name) == std::end(kDemoEntries))
      others.push_back(name);
  }
  std::sort(others.begin(), others.end());
  std::string list;
  for (const std::string& name : others) list += (list.empty() ? "" : ", ") + name;
  FERRY_CHECK(others.empty(), "demo",
              "--out {} holds {} besides a demo's files; the demo writes base-model/, finetuned/ and "
              "train.jsonl there, over what is there: give a new or empty directory, or an earlier demo's",
              dir.string(), list);
}

}  // namespace

DemoResult run_demo(const DemoOptions& options) {
  // A run's max_steps of 0 means "train the epochs"; the demo's steps are always counted.
  FERRY_CHECK(options.steps >= 1, "demo", "--steps {} is invalid; give 1 or more optimizer steps",
              options.steps);
  FERRY_CHECK(options.threads >= 0, "demo", "--threads {} is invalid; give a number of threads, or 0 for all",
              options.threads);
  if (options.threads > 0) ThreadPool::set_global_threads(static_cast<size_t>(options.threads));
  check_demo_dir(options.out_dir);
  const auto base_dir = options.out_dir / "base-model";
  const auto tuned_dir = options.out_dir / "finetuned";
  const auto data_path = options.out_dir / "train.jsonl";
  std::filesystem::create_directories(options.out_dir);
  std::filesystem::remove_all(tuned_dir);

  log_info("demo: task = reverse a string of {}-{} letters (a-j), e.g. 'abc=' -> 'cba'", kMinLength,
           kMaxLength);
  write_random_model(demo_model_config(), options.seed, base_dir);

  // Held-out evaluation strings never appear in the training data.
  std::mt19937_64 rng(options.seed);
  std::vector<Example> eval;
  std::set<std::string> held_out;
  while (static_cast<int64_t>(eval.size()) < options.eval_examples) {
    Example e = random_example(rng);
    if (held_out.insert(e.text).second) eval.push_back(e);
  }
  {
    std::ofstream out(data_path);
    for (int i = 0; i < 20000;) {
      Example e = random_example(rng);
      if (held_out.count(e.text)) continue;
      ++i;
      nlohmann::json ids = e.prompt(), labels = nlohmann::json::array();
      for (size_t k = 0; k < ids.size(); ++k) labels.push_back(-100);  // the prompt is not learned
      for (int32_t t : e.answer()) {
        ids.push_back(t);
        labels.push_back(t);
      }
      out << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
  }

  DemoResult result;
  log_info("demo: exact-match accuracy of the random model on {} held-out strings:", eval.size());
  result.accuracy_before = exact_match(base_dir, eval, true);
  log_info("demo: before fine-tuning: {:.1f}%", 100.0 * result.accuracy_before);

  TrainConfig config;
  config.model = base_dir;
  config.data = {data_path};
  config.output_dir = tuned_dir;
  config.seq_len = 64;
  config.global_batch = 16;
  config.micro_batch = 8;
  config.max_steps = options.steps;
  config.learning_rate = options.learning_rate;
  config.warmup_steps = 20;
  config.weight_decay = 0.01;
  config.max_grad_norm = 1.0;
  config.seed = options.seed;
  config.logging_steps = 25;
  config.threads = options.threads;
  const TrainSummary summary = run_training(config);
  result.first_loss = summary.steps.front().loss;
  result.last_loss = summary.steps.back().loss;

  log_info("demo: after fine-tuning:");
  result.accuracy_after = exact_match(tuned_dir, eval, true);
  log_info("demo: exact match {:.1f}% -> {:.1f}% ; loss {:.3f} -> {:.3f} ; model in {}",
           100.0 * result.accuracy_before, 100.0 * result.accuracy_after, result.first_loss, result.last_loss,
           tuned_dir.string());
  return result;
}

}  // namespace ferry
