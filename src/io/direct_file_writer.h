// Writes a large file front to back through O_DIRECT and io_uring (io/uring_file.h): the bytes are
// copied (or converted) into a ring of aligned staging buffers on the thread pool, and each full
// buffer is written while the next fills. Saves of weights and checkpoints stream through it
// (io/atomic_file.h, for files of kDirectWriteMinBytes or more).
//
// Why: a checkpoint of an 8B model is ~112 GB (bf16 weights, fp32 masters, m and v). Written with
// write() through the page cache, every byte is first copied into the cache by the one thread
// that writes (the kernel allocating and clearing its pages), and the cache then fills the host's
// last free memory with the file, beside a state that holds nearly all of it. O_DIRECT moves the
// bytes by DMA from buffers of a few MiB, several requests in flight as NVMe needs, and the
// copies into the buffers run on every core.
//
// The file's size need not be a multiple of the block size: the last block goes out padded with
// zeros, and the caller cuts the file back to the bytes it wrote (AtomicFile::commit). Where the
// file system refuses
// O_DIRECT or io_uring is not available, open() returns nullptr and the caller writes as before.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "io/uring_file.h"

namespace ferry {

// Files below this go through write(): the staging buffers and the ring cost more than they save.
inline constexpr size_t kDirectWriteMinBytes = size_t{32} << 20;

class DirectFileWriter {
 public:
  // Bytes [at, at + count) of a piece into dst[0, count): called on the pool's threads, for
  // disjoint ranges, so it must only read shared state.
  using Fill = std::function<void(std::byte* dst, size_t at, size_t count)>;

  static constexpr size_t kBufferBytes = size_t{8} << 20;
  static constexpr size_t kBuffers = 4;

  // Writes the existing file `path` (created and, where it can be, reserved by the caller) from
  // its start, `total_bytes` in all; nullptr where O_DIRECT or io_uring cannot be had there.
  static std::unique_ptr<DirectFileWriter> open(const std::filesystem::path& path, size_t total_bytes);
  ~DirectFileWriter();
  DirectFileWriter(const DirectFileWriter&) = delete;
  DirectFileWriter& operator=(const DirectFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // `bytes` produced by `fill` straight into the staging buffers, in pieces whose sizes are
  // multiples of `granule` (an element's size: a conversion never splits one).
  void write_filled(size_t bytes, size_t granule, const Fill& fill);
  // Writes what is staged and waits for every request; the file is then the bytes written
  // followed by at most a block of padding, which the caller truncates.
  void finish();

 private:
  DirectFileWriter(std::unique_ptr<std::byte, void (*)(void*)> memory, size_t total_bytes);
  // The free part of the current buffer, after waiting for its previous write.
  std::span<std::byte> space();
  // `bytes` of space() were filled; a full buffer is written.
  void advance(size_t bytes);
  void submit_current(size_t bytes);

  std::unique_ptr<std::byte, void (*)(void*)> memory_;  // kBuffers x kBufferBytes, aligned
  std::unique_ptr<UringFile> file_;
  std::vector<UringFile::Ticket> pending_;  // per buffer: its write in flight, or 0
  size_t current_ = 0;                      // the buffer being filled
  size_t fill_ = 0;                         // bytes in it
  size_t written_ = 0;                      // bytes handed to write / write_filled
  size_t total_ = 0;
};

}  // namespace ferry
