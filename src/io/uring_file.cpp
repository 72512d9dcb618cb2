#include "io/uring_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/byte_size.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

const char* where(UringUse use) {
  return use == UringUse::DiskTier ? "disk tier" : "save";
}

bool aligned(size_t value) {
  return value % UringFile::kAlignment == 0;
}

}  // namespace

struct UringFile::Ring {
  io_uring ring{};
};

// One request of at most max_request_bytes; resubmitted for its remainder after a short transfer.
struct UringFile::Piece {
  Ticket ticket = 0;
  bool is_write = false;
  size_t offset = 0;  // in the file
  std::byte* data = nullptr;
  size_t bytes = 0;
  size_t done = 0;  // bytes transferred so far
  int buffer = -1;  // registered buffer index, -1: plain request
};

struct UringFile::Operation {
  std::vector<std::unique_ptr<Piece>> pieces;
  size_t remaining = 0;  // pieces not yet complete
  std::string failure;   // the first piece's failure, if any
};

std::string uring_failure_message(const std::filesystem::path& path, bool is_write, size_t offset,
                                  size_t bytes, int error, UringUse use) {
  const char* name = error == 0 ? "end of file" : strerrorname_np(error);
  const char* text = error == 0 ? "the file is shorter than the state it should hold" : std::strerror(error);
  const bool full = error == ENOSPC || error == EDQUOT || error == EFBIG;
  const char* what_to_do =
      use == UringUse::Save
          ? (error == EFBIG
                 ? "raise the file size limit (ulimit -f) or write to another file system; earlier "
                   "saves are untouched"
             : full ? "free disk space or choose another output directory; earlier saves are untouched"
             : error == EIO ? "the disk reported a hardware or media error; check it (dmesg); earlier saves "
                              "are untouched"
                            : "check the disk and the output directory; earlier saves are untouched")
      : full ? "free space on that disk, or give disk_dir on a disk with room (ferry plan shows the bytes "
               "needed)"
      : error == EIO ? "the disk reported a hardware or media error; check it (dmesg) or give disk_dir on "
                       "another disk, and resume from the last checkpoint"
                     : "check the disk and disk_dir, and resume from the last checkpoint";
  return fmt::format("[{}] {} {} at offset {} of {} failed: {} ({}); {}", where(use),
                     is_write ? "writing" : "reading", format_bytes(bytes), offset, path.string(),
                     name ? name : "unknown error", text, what_to_do);
}

std::optional<int> transfer_failure(int result, bool is_write) {
  if (result > 0) return std::nullopt;
  return result < 0 ? -result : is_write ? ENOSPC : 0;
}

UringFile::UringFile(std::filesystem::path path, size_t bytes, std::vector<std::span<std::byte>> buffers,
                     UringFileOptions options)
    : path_(std::move(path)), bytes_(bytes), options_(options), buffers_(std::move(buffers)) {
  FERRY_ASSERT(options_.queue_depth > 0 && options_.max_request_bytes > 0 &&
               aligned(options_.max_request_bytes));
  for (const auto& b : buffers_)
    FERRY_CHECK(aligned(reinterpret_cast<uintptr_t>(b.data())) && aligned(b.size()), where(options_.use),
                "a buffer for {} is not aligned to {} bytes (address and size); allocate it aligned",
                path_.string(), kAlignment);
  const int flags = O_RDWR | O_CLOEXEC | (options_.create ? O_CREAT | O_TRUNC : 0);
  fd_ = ::open(path_.c_str(), flags | O_DIRECT, 0600);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) {
    fd_ = ::open(path_.c_str(), flags, 0600);
    if (fd_ >= 0 && options_.use == UringUse::DiskTier)
      log_info(
          "disk tier: the filesystem of {} refuses O_DIRECT; its state goes through the page cache (same "
          "bytes, one more copy, and the kernel may cache up to {} of it)",
          path_.string(), format_bytes(bytes_));
  }
  FERRY_CHECK(fd_ >= 0, where(options_.use), "cannot open {}: {}; give disk_dir a directory you can write",
              path_.string(), std::strerror(errno));
  if (options_.create && bytes_ > 0) {
    // fallocate, not ftruncate: the blocks are reserved now, so a full disk is refused here, before
    // training, and not by a write-back in the middle of a step.
    const int error = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes_));
    if (error != 0) {
      ::close(fd_);
      ::unlink(path_.c_str());
      fail(where(options_.use),
           "cannot set aside {} for {}: {} ({}); free space on that disk or lower disk_memory",
           format_bytes(bytes_), path_.string(), strerrorname_np(error), std::strerror(error));
    }
  }
  ring_ = std::make_unique<Ring>();
  const int init = io_uring_queue_init(options_.queue_depth, &ring_->ring, 0);
  if (init < 0) {
    ::close(fd_);
    fail(where(options_.use),
         "io_uring is not available ({}: {}); the disk tier needs Linux 5.6 or newer with io_uring "
         "allowed (containers may forbid it): set disk_memory: 0",
         strerrorname_np(-init), std::strerror(-init));
  }
  if (!buffers_.empty()) {
    // The kernel registers at most 1 GiB per buffer: larger ones are registered in pieces, and a
    // request that straddles two goes as a plain one.
    std::vector<iovec> iov;
    for (const auto& b : buffers_)
      for (size_t at = 0; at < b.size(); at += kMaxRegisteredBytes) {
        registered_spans_.push_back(b.subspan(at, std::min(kMaxRegisteredBytes, b.size() - at)));
        iov.push_back({registered_spans_.back().data(), registered_spans_.back().size()});
      }
    const int reg = io_uring_register_buffers(&ring_->ring, iov.data(), static_cast<unsigned>(iov.size()));
    registered_ = reg == 0;
    if (!registered_ && options_.use == UringUse::DiskTier)
      log_info("disk tier: buffers not registered with io_uring ({}: {}); plain requests instead",
               strerrorname_np(-reg), std::strerror(-reg));
  }
}

UringFile::~UringFile() {
  if (!ring_) return;
  // The buffers belong to the caller: nothing may still write into them after this returns. A
  // failed wait leaves the requests to io_uring_queue_exit, which cancels and waits for them.
  try {
    while (in_flight_ > 0) reap(true);
  } catch (const Error& e) {
    log_warn("{}", e.what());
  }
  io_uring_queue_exit(&ring_->ring);
  ::close(fd_);
}

namespace {

int span_index(const std::vector<std::span<std::byte>>& spans, const std::byte* data, size_t bytes) {
  for (size_t i = 0; i < spans.size(); ++i) {
    const std::byte* begin = spans[i].data();
    if (data >= begin && data + bytes <= begin + spans[i].size()) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

int UringFile::buffer_index(const std::byte* data, size_t bytes) const {
  return registered_ ? span_index(registered_spans_, data, bytes) : -1;
}

UringFile::Ticket UringFile::read(size_t offset, std::span<std::byte> into) {
  return submit(false, offset, into.data(), into.size());
}

UringFile::Ticket UringFile::write(size_t offset, std::span<const std::byte> from) {
  // The kernel only reads from the buffer of a write.
  return submit(true, offset, const_cast<std::byte*>(from.data()), from.size());
}

UringFile::Ticket UringFile::submit(bool is_write, size_t offset, std::byte* data, size_t bytes) {
  FERRY_CHECK(aligned(offset) && aligned(bytes) && aligned(reinterpret_cast<uintptr_t>(data)),
              where(options_.use),
              "{} {} bytes at offset {} of {}: offset, size and address must be multiples of {} (O_DIRECT)",
              is_write ? "writing" : "reading", bytes, offset, path_.string(), kAlignment);
  FERRY_CHECK(offset <= bytes_ && bytes <= bytes_ - offset, where(options_.use),
              "{} {} bytes at offset {} runs past the end of {} ({} bytes)", is_write ? "writing" : "reading",
              bytes, offset, path_.string(), bytes_);
  FERRY_ASSERT(span_index(buffers_, data, bytes) >= 0,
               "requests read into and write from the buffers given at construction");
  const Ticket ticket = next_ticket_++;
  auto op = std::make_unique<Operation>();
  for (size_t at = 0; at < bytes; at += options_.max_request_bytes) {
    auto piece = std::make_unique<Piece>();
    piece->ticket = ticket;
    piece->is_write = is_write;
    piece->offset = offset + at;
    piece->data = data + at;
    piece->bytes = std::min(options_.max_request_bytes, bytes - at);
    piece->buffer = buffer_index(piece->data, piece->bytes);
    pending_.push_back(piece.get());
    op->pieces.push_back(std::move(piece));
  }
  op->remaining = op->pieces.size();
  operations_.emplace(ticket, std::move(op));
  issue_pending();
  return ticket;
}

void UringFile::issue_pending() {
  size_t queued = 0;
  while (!pending_.empty() && in_flight_ < options_.queue_depth) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (sqe == nullptr) break;
    Piece* p = pending_.front();
    pending_.pop_front();
    std::byte* at = p->data + p->done;
    const unsigned len = static_cast<unsigned>(p->bytes - p->done);
    const off_t off = static_cast<off_t>(p->offset + p->done);
    if (p->is_write && p->buffer >= 0)
      io_uring_prep_write_fixed(sqe, fd_, at, len, off, p->buffer);
    else if (p->is_write)
      io_uring_prep_write(sqe, fd_, at, len, off);
    else if (p->buffer >= 0)
      io_uring_prep_read_fixed(sqe, fd_, at, len, off, p->buffer);
    else
      io_uring_prep_read(sqe, fd_, at, len, off);
    io_uring_sqe_set_data(sqe, p);
    ++in_flight_;
    ++queued;
  }
  peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
  if (queued == 0) return;
  int submitted;
  do submitted = io_uring_submit(&ring_->ring);
  while (submitted == -EINTR);
  FERRY_CHECK(submitted >= 0, where(options_.use), "submitting requests for {} failed: {}", path_.string(),
              std::strerror(-submitted));
}

bool UringFile::reap(bool block) {
  io_uring_cqe* cqe = nullptr;
  int got;
  if (block) {
    do got = io_uring_wait_cqe(&ring_->ring, &cqe);
    while (got == -EINTR);
  } else {
    got = io_uring_peek_cqe(&ring_->ring, &cqe);
    if (got == -EAGAIN) return false;
  }
  FERRY_CHECK(got == 0, where(options_.use), "waiting for requests of {} failed: {}", path_.string(),
              std::strerror(-got));
  Piece* piece = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
  const int result = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  --in_flight_;
  finish_piece(piece, result);
  issue_pending();
  return true;
}

void UringFile::finish_piece(Piece* piece, int result) {
  Operation& op = *operations_.at(piece->ticket);
  if (const std::optional<int> error = transfer_failure(result, piece->is_write)) {
    if (op.failure.empty())
      op.failure = uring_failure_message(path_, piece->is_write, piece->offset + piece->done,
                                         piece->bytes - piece->done, *error, options_.use);
    --op.remaining;
    return;
  }
  piece->done += static_cast<size_t>(result);
  if (piece->done < piece->bytes) {
    // A short transfer: the rest goes again (the kernel may split any request).
    pending_.push_front(piece);
    return;
  }
  --op.remaining;
}

bool UringFile::done(Ticket ticket) {
  // Completions of some requests (O_DIRECT writes among them) reach the ring only when this thread
  // enters the kernel to collect them: without this, a request done long ago looks in flight.
  const int flushed = io_uring_get_events(&ring_->ring);
  FERRY_CHECK(flushed >= 0 || flushed == -EINTR || flushed == -EAGAIN, where(options_.use),
              "collecting completions for {} failed: {}", path_.string(), std::strerror(-flushed));
  while (reap(false)) {
  }
  const auto it = operations_.find(ticket);
  return it == operations_.end() || it->second->remaining == 0;
}

void UringFile::wait(Ticket ticket) {
  const auto it = operations_.find(ticket);
  if (it == operations_.end()) return;  // waited for before
  while (it->second->remaining > 0) reap(true);
  const std::string failure = std::move(it->second->failure);
  operations_.erase(it);
  if (!failure.empty()) throw Error(failure);
}

void UringFile::wait_all() {
  std::vector<Ticket> tickets;
  for (const auto& [ticket, op] : operations_) tickets.push_back(ticket);
  std::sort(tickets.begin(), tickets.end());
  std::string first;
  for (Ticket t : tickets) {
    try {
      wait(t);
    } catch (const Error& e) {
      if (first.empty()) first = e.what();
    }
  }
  if (!first.empty()) throw Error(first);
}

}  // namespace ferry
