// The tiny Llama preset of `ferry init` as the fault tests' model: its config.json text, and a
// model directory of it (config.json + model.safetensors with random weights).
#pragma once

#include <filesystem>
#include <string>

namespace ferry::faults {

std::string tiny_config_json();
void write_tiny_model(const std::filesystem::path& dir);

}  // namespace ferry::faults
