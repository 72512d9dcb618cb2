#include "train/output_dir.h"

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/text_file.h"
#include "io/atomic_file.h"
#include "io/completion_marker.h"
#include "model/model_weights.h"
#include "tokenizer/chat_template.h"

namespace ferry {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The files of a model directory that say how to use the weights (tokenizer, generation settings,
// chat template, model card, licence), copied byte for byte into every model directory ferry
// writes. An allow-list, not a deny-list: the input may be an earlier run's output (metrics.jsonl,
// checkpoint-*, COMPLETE, its cache and lock) or hold whatever else a user keeps beside a model,
// and none of that may pass into the new run's directory. Weights and config.json are written, not
// copied.
bool is_copied_model_file(const std::string& name) {
  static const std::set<std::string> kNames = {"tokenizer.json",
                                               "tokenizer_config.json",
                                               "special_tokens_map.json",
                                               "added_tokens.json",
                                               "tokenizer.model",
                                               "spiece.model",
                                               "sentencepiece.bpe.model",
                                               "tekken.json",
                                               "vocab.json",
                                               "vocab.txt",
                                               "merges.txt",
                                               "generation_config.json",
                                               "chat_template.jinja",
                                               "chat_template.json",
                                               "preprocessor_config.json",
                                               "processor_config.json",
                                               "README.md",
                                               "USE_POLICY.md"};
  if (kNames.count(name)) return true;
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* prefix : {"license", "licence", "notice", "copying"})
    if (starts_with(lower, prefix)) return true;
  // Versioned SentencePiece files (Mistral's tokenizer.model.v3), tiktoken vocabularies, and the
  // code a config.json's auto_map names (trust_remote_code models).
  if (starts_with(name, "tokenizer.model.v") || ends_with(name, ".tiktoken")) return true;
  for (const char* prefix : {"configuration_", "modeling_", "tokenization_"})
    if (starts_with(name, prefix) && ends_with(name, ".py")) return true;
  return false;
}

// transformers saves extra named chat templates as additional_chat_templates/NAME.jinja.
constexpr const char* kTemplatesDir = "additional_chat_templates";

void copy_model_files(const std::filesystem::path& source_dir, const std::filesystem::path& out_dir) {
  for (const auto& entry : std::filesystem::directory_iterator(source_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_copied_model_file(name)) {
      write_file_atomic(out_dir / name, read_text_file(entry.path(), "output"));
    } else if (entry.is_directory() && name == kTemplatesDir) {
      std::filesystem::create_directories(out_dir / name);
      for (const auto& t : std::filesystem::directory_iterator(entry.path()))
        if (t.is_regular_file() && ends_with(t.path().filename().string(), ".jinja"))
          write_file_atomic(out_dir / name / t.path().filename(), read_text_file(t.path(), "output"));
      sync_directory(out_dir / name);
    } else if (name != "config.json") {
      log_debug("not copied from {}: {} (not a tokenizer, template or model card file)", source_dir.string(),
                name);
    }
  }
}

}  // namespace

std::string config_json_text(const ModelConfig& config, DType dtype,
                             const std::filesystem::path& source_dir) {
  const bool has_source = !source_dir.empty() && std::filesystem::exists(source_dir / "config.json");
  if (has_source && dtype == config.dtype) return read_text_file(source_dir / "config.json", "output");
  nlohmann::json json = config.raw.is_object() ? config.raw : model_config_to_json(config);
  const std::string name(torch_dtype_name(dtype));
  // transformers 5 writes `dtype`, older versions `torch_dtype`; edit whichever the input has.
  bool edited = false;
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (json.contains(key)) {
      json[key] = name;
      edited = true;
    }
  }
  if (!edited) json["torch_dtype"] = name;
  return json.dump(2) + "\n";
}

void write_hf_model_dir(const std::filesystem::path& out_dir, const std::filesystem::path& source_dir,
                        const ModelConfig& config, const ModelLayout& layout,
                        const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                        const UnitFetch& fetch, const UnitBytes& encoded) {
  std::error_code ec;
  if (!source_dir.empty() && std::filesystem::exists(out_dir) &&
      std::filesystem::equivalent(out_dir, source_dir, ec)) {
    fail("output",
         "output directory '{}' is the input model directory; choose another output_dir so the input "
         "is not overwritten",
         out_dir.string());
  }
  std::filesystem::create_directories(out_dir);
  save_model_weights(out_dir, layout, units, dtype, max_shard_bytes, fetch, encoded);
  write_file_atomic(out_dir / "config.json", config_json_text(config, dtype, source_dir));
  if (!source_dir.empty() && std::filesystem::is_directory(source_dir, ec)) {
    copy_model_files(source_dir, out_dir);
  } else if (!source_dir.empty()) {
    // The input went away while the run trained (deleted, or another run's rotated checkpoint):
    // the trained weights are worth more than the files that would have come with them.
    log_warn(
        "the input model directory {} is gone: {} is written without the tokenizer, template and model "
        "card files it would have copied from there; copy them in from another copy of the model",
        source_dir.string(), out_dir.string());
  }
  sync_directory(out_dir);
}

void write_final_model_dir(const std::filesystem::path& out_dir, const std::filesystem::path& source_dir,
                           const ModelConfig& config, const ModelLayout& layout,
                           const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                           const std::filesystem::path& tokenizer, const std::filesystem::path& chat_template,
                           const std::string& if_it_fails, const UnitFetch& fetch, const UnitBytes& encoded) {
  unmark_complete(out_dir);
  try {
    write_hf_model_dir(out_dir, source_dir, config, layout, units, dtype, max_shard_bytes, fetch, encoded);
    write_tokenizer_overrides(out_dir, tokenizer, chat_template);
  } catch (const std::exception& e) {
    // Error (a full disk, from AtomicFile) or filesystem_error (a directory operation).
    fail("output", "writing the model into {} failed: {}; the directory is not marked complete; {}",
         out_dir.string(), e.what(), if_it_fails);
  }
  mark_complete(out_dir);
}

void check_tokenizer_overrides(const std::filesystem::path& tokenizer,
                               const std::filesystem::path& chat_template) {
  std::error_code ec;
  if (!tokenizer.empty()) {
    const bool file = std::filesystem::is_regular_file(tokenizer, ec);
    const std::filesystem::path json = file ? tokenizer : tokenizer / "tokenizer.json";
    FERRY_CHECK(std::filesystem::is_regular_file(json, ec), "output",
                "tokenizer: {} is neither a tokenizer.json nor a directory holding one; the trained model's "
                "directory gets its tokenizer files from there: give the tokenizer's directory (or its "
                "tokenizer.json), or leave tokenizer: out to use the model's",
                tokenizer.string());
  }
  // Parsed as the end of the run parses it (special tokens do not matter to whether it parses).
  if (!chat_template.empty()) ChatTemplate::from_file(chat_template, nlohmann::json::object());
}

void write_tokenizer_overrides(const std::filesystem::path& out_dir, const std::filesystem::path& tokenizer,
                               const std::filesystem::path& chat_template) {
  std::error_code ec;
  if (!tokenizer.empty()) {
    const std::filesystem::path dir =
        std::filesystem::is_regular_file(tokenizer, ec) ? tokenizer.parent_path() : tokenizer;
    for (const char* name :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
      if (std::filesystem::exists(out_dir / name, ec) && std::filesystem::exists(dir / name, ec) &&
          std::filesystem::equivalent(dir / name, out_dir / name, ec))
        continue;
      if (std::filesystem::exists(dir / name, ec)) {
        write_file_atomic(out_dir / name, read_text_file(dir / name, "output"));
      } else if (std::string(name) == "chat_template.jinja") {
        // Training read the tokenizer directory's template (its tokenizer_config.json), not the
        // model's file, which a reader would otherwise prefer.
        std::filesystem::remove(out_dir / name, ec);
      }
    }
  }
  if (!chat_template.empty()) {
    const std::filesystem::path config_path = out_dir / "tokenizer_config.json";
    nlohmann::json config = nlohmann::json::object();
    const bool has_config = std::filesystem::exists(config_path, ec);
    if (has_config) {
      try {
        config = nlohmann::json::parse(read_text_file(config_path, "output"));
      } catch (const nlohmann::json::exception& e) {
        fail("output", "{} is not valid JSON: {}", config_path.string(), e.what());
      }
    }
    const std::string text = ChatTemplate::from_file(chat_template, config).source();
    write_file_atomic(out_dir / "chat_template.jinja", text);
    if (has_config && config.is_object()) {
      config["chat_template"] = text;
      write_file_atomic(config_path, config.dump(2) + "\n");
    }
  }
  sync_directory(out_dir);
}

}  // namespace ferry
