// Writing a Hugging Face model directory that transformers, vLLM and llama.cpp's converter load:
// weights in the requested dtype with `__metadata__ {"format":"pt"}` (sharded past a size),
// config.json repeated from the input with only changed keys edited, and an allow-list of the
// input's tokenizer, generation, chat-template and model-card files copied byte for byte.
#pragma once

#include <filesystem>
#include <vector>

#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/unit_layout.h"

namespace ferry {

// `source_dir` is the model directory training started from (its non-weight files are copied);
// it may be empty for a model created from scratch. `units` are fp32 buffers laid out by `layout`;
// a nullptr unit is written from `encoded` where it has the unit's bytes in `dtype`, else fetched
// when written (model/model_weights.h UnitFetch, UnitBytes: the disk tier's units).
void write_hf_model_dir(const std::filesystem::path& out_dir, const std::filesystem::path& source_dir,
                        const ModelConfig& config, const ModelLayout& layout,
                        const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                        const UnitFetch& fetch = {}, const UnitBytes& encoded = {});

// Where the run overrode the model's tokenizer or chat template (`tokenizer:`, `chat_template:`;
// either may be empty), the output directory serves what was trained with: tokenizer.json,
// tokenizer_config.json and special_tokens_map.json from the tokenizer directory (or the directory
// of a tokenizer.json given), and the template as chat_template.jinja and as tokenizer_config.json's
// "chat_template". Call after write_hf_model_dir, which copied the model's own files.
void write_tokenizer_overrides(const std::filesystem::path& out_dir, const std::filesystem::path& tokenizer,
                               const std::filesystem::path& chat_template);

// Checks at a run's start what write_tokenizer_overrides() reads at its end, so that a wrong path
// or a template that does not parse is refused before the run trains: a `tokenizer` given is a
// tokenizer.json or a directory holding one, a `chat_template` given is a file that parses.
void check_tokenizer_overrides(const std::filesystem::path& tokenizer,
                               const std::filesystem::path& chat_template);

// The run's final model directory: its completion marker (io/completion_marker.h) is removed
// first, then the weights, config.json, the model's files and the tokenizer overrides are
// written (each fsynced), and the marker is written last. A kill or a full disk at any point
// leaves a directory without the marker, never one that looks complete and is not. A failure
// throws ferry::Error naming the directory and the cause, followed by `if_it_fails` (what of the
// run survives, and what to do: checkpoint.h's what_survives_a_failed_save).
void write_final_model_dir(const std::filesystem::path& out_dir, const std::filesystem::path& source_dir,
                           const ModelConfig& config, const ModelLayout& layout,
                           const std::vector<const float*>& units, DType dtype, size_t max_shard_bytes,
                           const std::filesystem::path& tokenizer, const std::filesystem::path& chat_template,
                           const std::string& if_it_fails, const UnitFetch& fetch = {},
                           const UnitBytes& encoded = {});

// The config.json text for `config` saved in `dtype`: the input's bytes when nothing changed,
// else the input's keys with the dtype keys edited.
std::string config_json_text(const ModelConfig& config, DType dtype, const std::filesystem::path& source_dir);

}  // namespace ferry
