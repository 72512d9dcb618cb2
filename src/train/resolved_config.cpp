#include "train/resolved_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <type_traits>

#include "core/check.h"
#include "core/dtype.h"
#include "data/record_formats.h"
#include "optim/lr_schedule.h"
#include "optim/state_format.h"

namespace ferry {

namespace {

using Writer = std::function<void(YAML::Emitter&, const TrainConfig&)>;

const char* offload_name(ActivationOffload o) {
  return o == ActivationOffload::All ? "all" : o == ActivationOffload::None ? "none" : "auto";
}

void write_json(YAML::Emitter& out, const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    out << YAML::Flow << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      write_json(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : j) write_json(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();
  } else if (j.is_null()) {
    out << YAML::Null;
  } else {
    out << j.dump();  // numbers and booleans as JSON writes them, which YAML reads back the same
  }
}

// One writer per key of train_config_keys(); a key without one is caught by the test that compares
// them, so that config.yaml never silently lacks a setting.
const std::map<std::string, Writer>& writers() {
  auto path = [](std::filesystem::path TrainConfig::*member) {
    return Writer([member](YAML::Emitter& o, const TrainConfig& c) { o << (c.*member).string(); });
  };
  auto value = [](auto member) {
    return Writer([member](YAML::Emitter& o, const TrainConfig& c) {
      // Doubles in their shortest exact form (0.9, not 0.90000000000000002).
      if constexpr (std::is_same_v<std::decay_t<decltype(c.*member)>, double>)
        o << fmt::format("{}", c.*member);
      else
        o << c.*member;
    });
  };
  auto optional_size = [](std::optional<int64_t> TrainConfig::*member) {
    return Writer([member](YAML::Emitter& o, const TrainConfig& c) {
      if ((c.*member).has_value())
        o << *(c.*member);
      else
        o << "auto";
    });
  };
  // A count the planner picks where it is negative (`auto`).
  auto count_or_auto = [](int64_t TrainConfig::*member) {
    return Writer([member](YAML::Emitter& o, const TrainConfig& c) {
      if (c.*member < 0)
        o << "auto";
      else
        o << c.*member;
    });
  };
  static const std::map<std::string, Writer> table = {
      {"model", path(&TrainConfig::model)},
      {"data",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << YAML::BeginSeq;
         for (const auto& p : c.data) o << p.string();
         o << YAML::EndSeq;
       }},
      {"eval_data",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << YAML::Flow << YAML::BeginSeq;
         for (const auto& p : c.eval_data) o << p.string();
         o << YAML::EndSeq;
       }},
      {"val_split", value(&TrainConfig::val_split)},
      {"eval_steps", value(&TrainConfig::eval_steps)},
      {"save_best", value(&TrainConfig::save_best)},
      {"early_stopping_patience", value(&TrainConfig::early_stopping_patience)},
      {"report_to",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.report_to == ReportTo::TensorBoard ? "tensorboard" : "none");
       }},
      {"data_format", [](YAML::Emitter& o, const TrainConfig& c) { o << data_format_name(c.data_format); }},
      {"output_dir", path(&TrainConfig::output_dir)},
      {"skip_malformed", value(&TrainConfig::skip_malformed)},
      {"train_on_prompt", value(&TrainConfig::train_on_prompt)},
      {"tokenizer", path(&TrainConfig::tokenizer)},
      {"chat_template", path(&TrainConfig::chat_template)},
      {"chat_template_kwargs",
       [](YAML::Emitter& o, const TrainConfig& c) { write_json(o, c.chat_template_kwargs); }},
      {"cache_dir", path(&TrainConfig::cache_dir)},
      {"seq_len", value(&TrainConfig::seq_len)},
      {"global_batch", value(&TrainConfig::global_batch)},
      {"micro_batch",
       [](YAML::Emitter& o, const TrainConfig& c) {
         if (c.micro_batch == 0)
           o << "auto";
         else
           o << c.micro_batch;
       }},
      {"seq_tile",
       [](YAML::Emitter& o, const TrainConfig& c) {
         if (c.seq_tile < 0)
           o << "auto";
         else if (c.seq_tile == 0)
           o << "off";
         else
           o << c.seq_tile;
       }},
      {"keep_every", count_or_auto(&TrainConfig::keep_every)},
      {"sweeps", count_or_auto(&TrainConfig::sweeps)},
      {"head_groups", count_or_auto(&TrainConfig::head_groups)},
      {"gradient_accumulation_steps", value(&TrainConfig::gradient_accumulation_steps)},
      {"packing", value(&TrainConfig::packing)},
      {"packing_strategy",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.packing_strategy == PackingStrategy::BestFit ? "best_fit"
               : c.packing_strategy == PackingStrategy::Split ? "split"
                                                              : "auto");
       }},
      {"shuffle", value(&TrainConfig::shuffle)},
      {"max_steps", value(&TrainConfig::max_steps)},
      {"epochs", value(&TrainConfig::epochs)},
      {"learning_rate", value(&TrainConfig::learning_rate)},
      {"lr_scheduler_type",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << std::string(lr_schedule_name(c.lr_scheduler_type));
       }},
      {"warmup_steps", value(&TrainConfig::warmup_steps)},
      {"warmup_ratio", value(&TrainConfig::warmup_ratio)},
      {"min_lr_ratio", value(&TrainConfig::min_lr_ratio)},
      {"weight_decay", value(&TrainConfig::weight_decay)},
      {"adam_beta1", value(&TrainConfig::adam_beta1)},
      {"adam_beta2", value(&TrainConfig::adam_beta2)},
      {"adam_epsilon", value(&TrainConfig::adam_epsilon)},
      {"max_grad_norm", value(&TrainConfig::max_grad_norm)},
      {"decay_norms_and_biases", value(&TrainConfig::decay_norms_and_biases)},
      {"seed", value(&TrainConfig::seed)},
      {"logging_steps", value(&TrainConfig::logging_steps)},
      {"save_steps", value(&TrainConfig::save_steps)},
      {"save_total_limit", value(&TrainConfig::save_total_limit)},
      {"resume", value(&TrainConfig::resume)},
      {"overwrite_output_dir", value(&TrainConfig::overwrite_output_dir)},
      {"save_dtype",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.save_dtype ? std::string(torch_dtype_name(*c.save_dtype)) : std::string("auto"));
       }},
      {"max_shard_size", value(&TrainConfig::max_shard_bytes)},
      {"device", [](YAML::Emitter& o, const TrainConfig& c) { o << device_kind_name(c.device); }},
      {"gpu_memory", optional_size(&TrainConfig::gpu_memory)},
      {"gpus",
       [](YAML::Emitter& o, const TrainConfig& c) {
         if (c.gpus == 0)
           o << "auto";
         else
           o << c.gpus;
       }},
      {"host_memory", optional_size(&TrainConfig::host_memory)},
      {"threads", value(&TrainConfig::threads)},
      {"gpu_slots", value(&TrainConfig::gpu_slots)},
      {"offload_activations",
       [](YAML::Emitter& o, const TrainConfig& c) { o << offload_name(c.offload_activations); }},
      {"internals_on_host", value(&TrainConfig::internals_on_host)},
      {"streamed_optimizer", value(&TrainConfig::streamed_optimizer)},
      {"keep_norm_outputs", value(&TrainConfig::keep_norm_outputs)},
      {"keep_activation", value(&TrainConfig::keep_activation)},
      {"group_head_weight_grad", value(&TrainConfig::group_head_weight_grad)},
      {"recompute",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.recompute == RecomputePolicy::All ? "all" : "auto");
       }},
      {"optimizer_state",
       [](YAML::Emitter& o, const TrainConfig& c) { o << state_format_name(c.optimizer_state); }},
      {"weight_upload",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.weight_upload ? weight_upload_name(*c.weight_upload) : "auto");
       }},
      {"update_schedule",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << (c.update_schedule ? update_name(*c.update_schedule) : "auto");
       }},
      {"resident_layers", value(&TrainConfig::resident_layers)},
      {"disk_memory", value(&TrainConfig::disk_memory)},
      {"disk_dir", path(&TrainConfig::disk_dir)},
      {"disk_layers", value(&TrainConfig::disk_layers)},
      {"trace", path(&TrainConfig::trace)},
      {"trace_memory", value(&TrainConfig::trace_memory)},
      {"trace_steps",
       [](YAML::Emitter& o, const TrainConfig& c) {
         o << YAML::Flow << YAML::BeginSeq;
         for (int64_t s : c.trace_steps) o << s;
         o << YAML::EndSeq;
       }},
      {"profile", path(&TrainConfig::profile)},
  };
  return table;
}

}  // namespace

std::string resolved_config_yaml(const TrainConfig& config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const std::string& key : train_config_keys()) {
    const auto it = writers().find(key);
    FERRY_ASSERT(it != writers().end(), "a config key has no writer in resolved_config.cpp");
    out << YAML::Key << key << YAML::Value;
    it->second(out, config);
  }
  out << YAML::EndMap;
  return "# The configuration this run used: every key, defaults included (ferry train reads it back).\n" +
         std::string(out.c_str()) + "\n";
}

}  // namespace ferry
