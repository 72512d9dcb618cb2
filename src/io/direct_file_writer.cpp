#include "io/direct_file_writer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace ferry {

namespace {

constexpr size_t kBlock = UringFile::kAlignment;
// Pieces of a copy or a fill that one thread of the pool takes at least: large enough that a
// task's start is noise, small enough that a buffer keeps every thread busy.
constexpr size_t kThreadPiece = size_t{1} << 20;

size_t round_up_to_block(size_t bytes) {
  return (bytes + kBlock - 1) / kBlock * kBlock;
}

}  // namespace

std::unique_ptr<DirectFileWriter> DirectFileWriter::open(const std::filesystem::path& path,
                                                         size_t total_bytes) {
  std::unique_ptr<std::byte, void (*)(void*)> memory(
      static_cast<std::byte*>(std::aligned_alloc(kBlock, kBuffers * kBufferBytes)), std::free);
  if (!memory) return nullptr;
  std::unique_ptr<DirectFileWriter> writer(new DirectFileWriter(std::move(memory), total_bytes));
  UringFileOptions options;
  options.queue_depth = 16;
  options.max_request_bytes = size_t{2} << 20;  // a buffer is 4 requests: 8 to 16 in flight
  options.create = false;
  options.use = UringUse::Save;
  try {
    writer->file_ = std::make_unique<UringFile>(
        path, std::max(kBlock, round_up_to_block(total_bytes)),
        std::vector<std::span<std::byte>>{{writer->memory_.get(), kBuffers * kBufferBytes}}, options);
  } catch (const Error&) {
    return nullptr;  // io_uring not available here: written through write() instead
  }
  if (!writer->file_->direct()) return nullptr;
  return writer;
}

DirectFileWriter::DirectFileWriter(std::unique_ptr<std::byte, void (*)(void*)> memory, size_t total_bytes)
    : memory_(std::move(memory)), pending_(kBuffers, 0), total_(total_bytes) {}

// file_ is declared after memory_, so it goes first: its destructor waits for every request that
// still reads a buffer.
DirectFileWriter::~DirectFileWriter() = default;

std::span<std::byte> DirectFileWriter::space() {
  if (pending_[current_] != 0) {
    file_->wait(pending_[current_]);
    pending_[current_] = 0;
  }
  return {memory_.get() + current_ * kBufferBytes + fill_, kBufferBytes - fill_};
}

void DirectFileWriter::advance(size_t bytes) {
  fill_ += bytes;
  written_ += bytes;
  if (fill_ == kBufferBytes) submit_current(kBufferBytes);
}

void DirectFileWriter::submit_current(size_t bytes) {
  std::byte* base = memory_.get() + current_ * kBufferBytes;
  const size_t padded = round_up_to_block(bytes);
  std::memset(base + bytes, 0, padded - bytes);  // the last block's tail, cut off by the caller
  const size_t offset = written_ - fill_;        // every buffer but the last is full: block-aligned
  pending_[current_] = file_->write(offset, {base, padded});
  current_ = (current_ + 1) % kBuffers;
  fill_ = 0;
}

void DirectFileWriter::write(const void* data, size_t bytes) {
  const auto* from = static_cast<const std::byte*>(data);
  write_filled(bytes, 1,
               [from](std::byte* dst, size_t at, size_t count) { std::memcpy(dst, from + at, count); });
}

void DirectFileWriter::write_filled(size_t bytes, size_t granule, const Fill& fill) {
  FERRY_ASSERT(granule > 0 && bytes % granule == 0 && granule <= kBufferBytes);
  FERRY_CHECK(written_ + bytes <= total_, "save", "writing {} bytes past the {} set aside for the file",
              written_ + bytes - total_, total_);
  size_t at = 0;
  while (at < bytes) {
    const std::span<std::byte> free = space();
    const size_t count = std::min(free.size(), bytes - at) / granule * granule;
    if (count == 0) {
      // Less than an element left in this buffer: the element goes through a bounce, split
      // between this buffer and the next.
      std::vector<std::byte> bounce(granule);
      fill(bounce.data(), at, granule);
      const size_t head = free.size();
      std::memcpy(free.data(), bounce.data(), head);
      advance(head);
      const std::span<std::byte> next = space();
      std::memcpy(next.data(), bounce.data() + head, granule - head);
      advance(granule - head);
      at += granule;
      continue;
    }
    const size_t elements = count / granule;
    ThreadPool::global().parallel_for(
        elements,
        [&](size_t lo, size_t hi) {
          fill(free.data() + lo * granule, at + lo * granule, (hi - lo) * granule);
        },
        std::max<size_t>(1, kThreadPiece / granule));
    advance(count);
    at += count;
  }
}

void DirectFileWriter::finish() {
  if (fill_ > 0) submit_current(fill_);
  file_->wait_all();
  std::fill(pending_.begin(), pending_.end(), 0);
}

}  // namespace ferry
