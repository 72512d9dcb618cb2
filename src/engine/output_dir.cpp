#include "engine/output_dir.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "model/model_weights.h"
#include "tokenizer/chat_template.h"

namespace ferry {

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FERRY_CHECK(in.good(), "output", "cannot read '{}'", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Files of a model directory that are weights or config, which ferry writes itself; and formats of
// weights it never copies (they would be stale after training).
bool is_written_or_stale(const std::filesystem::path& file) {
  const std::string name = file.filename().string();
  const std::string ext = file.extension().string();
  static const std::set<std::string> kExts = {".safetensors", ".bin", ".pth", ".pt", ".ckpt", ".gguf", ".h5", ".msgpack"};
  return name == "config.json" || name == "model.safetensors.index.json" || name == "pytorch_model.bin.index.json" ||
         kExts.count(ext) > 0;
}

}  // namespace

std::string config_json_text(const ModelConfig& config, DType dtype, const std::filesystem::path& source_dir) {
  const bool has_source = !source_dir.empty() && std::filesystem::exists(source_dir / "config.json");
  if (has_source && dtype == config.dtype) return read_text(source_dir / "config.json");
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
                        const ModelConfig& config, const ModelLayout& layout, const std::vector<const float*>& units,
                        DType dtype, size_t max_shard_bytes) {
  std::error_code ec;
  if (!source_dir.empty() && std::filesystem::exists(out_dir) &&
      std::filesystem::equivalent(out_dir, source_dir, ec)) {
    fail("output", "output directory '{}' is the input model directory; choose another output_dir so the input "
                   "is not overwritten", out_dir.string());
  }
  std::filesystem::create_directories(out_dir);
  save_model_weights(out_dir, layout, units, dtype, max_shard_bytes);
  write_file_atomic(out_dir / "config.json", config_json_text(config, dtype, source_dir));
  if (!source_dir.empty()) {
    for (const auto& entry : std::filesystem::directory_iterator(source_dir)) {
      if (!entry.is_regular_file() || is_written_or_stale(entry.path())) continue;
      write_file_atomic(out_dir / entry.path().filename(), read_text(entry.path()));
    }
  }
  sync_directory(out_dir);
}

void write_tokenizer_overrides(const std::filesystem::path& out_dir, const std::filesystem::path& tokenizer,
                               const std::filesystem::path& chat_template) {
  std::error_code ec;
  if (!tokenizer.empty()) {
    const std::filesystem::path dir =
        std::filesystem::is_regular_file(tokenizer, ec) ? tokenizer.parent_path() : tokenizer;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
      if (std::filesystem::exists(out_dir / name, ec) && std::filesystem::exists(dir / name, ec) &&
          std::filesystem::equivalent(dir / name, out_dir / name, ec))
        continue;
      if (std::filesystem::exists(dir / name, ec)) {
        write_file_atomic(out_dir / name, read_text(dir / name));
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
        config = nlohmann::json::parse(read_text(config_path));
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
