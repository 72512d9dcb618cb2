// Writing safetensors files and Hugging Face model directories (single file or shards + index).
//
// Files are written to PATH.tmp, fsynced and renamed (io/atomic_file.h), so a crash never leaves a
// half-written file under the final name. The output loads in transformers, the safetensors
// library, vLLM and llama.cpp's converter: the header is padded with spaces to a multiple of 8
// bytes, and the tensors' data follow each other without gaps (the safetensors library rejects
// gaps), largest element size first, so every tensor starts aligned to its element size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ferry {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype_size(dtype) bytes
  // Instead of `data`: fp32 values converted to `dtype` as they are written, a few MiB at a time,
  // so that saving a model needs no second copy of it in memory.
  const float* f32_source = nullptr;
  // Instead of either pointer: called right before the tensor's bytes are written, and what it
  // returns is used as `data`; it need stay valid only until the next fetch. For state not in RAM
  // (the disk tier's), brought in one unit at a time through a buffer the run has anyway, so that
  // writing it needs no copy of it in memory.
  std::function<const void*()> fetch = nullptr;
  // Instead of all three: fp32 values [at, at + count) of the tensor, asked for a piece (kF32Piece
  // elements) at a time as they are converted and written, each valid until the next call: masters
  // on disk, or decoded from a lean format into a buffer of one piece.
  std::function<const float*(size_t at, size_t count)> f32_pieces = nullptr;
};

// Elements converted (and, with f32_pieces, fetched) at a time.
inline constexpr size_t kF32Piece = size_t{4} << 20;

// Writes one file. Header keys follow the given order, after "__metadata__" (omitted when empty).
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes DIR/model.safetensors when the tensors total at most max_shard_bytes, otherwise
// DIR/model-00001-of-0000N.safetensors ... and DIR/model.safetensors.index.json
// ({"metadata": {"total_size": ...}, "weight_map": {name: file}}), named as transformers names them,
// each file with __metadata__ {"format": "pt"}. Tensors fill shards in the given order and are
// never split; one larger than max_shard_bytes gets a shard of its own. Weight files of an earlier
// save into DIR (model.safetensors, model-*-of-*.safetensors, the index) that this save does not
// overwrite are removed. DIR is created when missing.
void write_safetensors_model(const std::filesystem::path& dir, const std::vector<TensorToWrite>& tensors,
                             size_t max_shard_bytes = size_t{5} << 30);

// fp32 values encoded as `to` (F32, BF16, F16, F64), rounding to nearest even: the bytes of a
// TensorToWrite saved in the model's own dtype.
std::vector<uint8_t> encode_f32(const float* src, size_t count, DType to);

}  // namespace ferry
