// A preallocated file read and written in large asynchronous requests through io_uring, for the
// disk tier of optimizer state (DESIGN.md §7): the caller submits a read or a write of a whole
// array and gets a ticket, keeps computing while the requests are in flight, and waits on the
// ticket when it needs the bytes (or the buffer back).
//
// Why io_uring, O_DIRECT and registered buffers: a disk tier streams 10+ bytes/param every step
// through a few RAM buffers. Through the page cache every byte would be copied once more and the
// cache would grow to the file's size (host memory the plan does not count); O_DIRECT moves the
// bytes between the disk and our buffers by DMA. Registered (fixed) buffers are pinned once, so
// the kernel does not map the pages of each request again. Several requests in flight (the queue
// depth) are what NVMe needs to reach its rate (the profile's 2.3 GB/s was measured at depth 32).
//
// Every offset, size and buffer address must be a multiple of kAlignment (the strictest logical
// block size of NVMe and of the filesystems we meet): O_DIRECT requires it, and requiring it also
// where O_DIRECT is missing keeps the callers' layout one layout. Where the filesystem refuses
// O_DIRECT (EINVAL at open: older tmpfs, some FUSE and network filesystems), the file is opened
// buffered (a save asks direct() and writes otherwise); where the buffers cannot be registered
// (RLIMIT_MEMLOCK), plain requests are used. For the disk tier a line says either. Neither changes
// a byte of what is read or written.
//
// Requests larger than max_request_bytes are cut into pieces; a short read or write (which the
// kernel may return at any size) is resubmitted for its remainder; a read that reaches the end of
// the file, and any error the kernel returns (ENOSPC, EIO, ...), fail the ticket: wait() throws
// ferry::Error naming the file, the offset, the size and the errno.
//
// One thread uses a UringFile at a time (the disk tier's owner serializes); the destructor waits
// for every request in flight (their buffers belong to the caller) and closes the file; removing
// it is the owner's business (io/scratch_file.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry {

// What a file is for: its messages name it and say what to do (the disk tier's state, or a save:
// io/direct_file_writer.h).
enum class UringUse { DiskTier, Save };

struct UringFileOptions {
  unsigned queue_depth = 32;                    // requests in flight at most
  size_t max_request_bytes = size_t{16} << 20;  // larger transfers are cut into pieces of this size
  bool create = true;  // create and preallocate the file; false: open an existing file (or device) as it is
  UringUse use = UringUse::DiskTier;
};

class UringFile {
 public:
  static constexpr size_t kAlignment = 4096;
  using Ticket = uint64_t;

  // Opens `path` with room for `bytes` (created, or truncated, and preallocated when
  // options.create). `buffers`: the memory every request will read into or write from (each
  // aligned), registered with the kernel where it allows. Throws ferry::Error, naming the path and
  // what to do, when the file cannot be created or the disk has no room for `bytes`.
  UringFile(std::filesystem::path path, size_t bytes, std::vector<std::span<std::byte>> buffers,
            UringFileOptions options = {});
  ~UringFile();
  UringFile(const UringFile&) = delete;
  UringFile& operator=(const UringFile&) = delete;

  // Reads file bytes [offset, offset + into.size()) into `into` / writes `from` there. `into` and
  // `from` must lie in one of the buffers given at construction.
  Ticket read(size_t offset, std::span<std::byte> into);
  Ticket write(size_t offset, std::span<const std::byte> from);
  // Blocks until every piece of the ticket has completed; throws ferry::Error if one failed.
  void wait(Ticket ticket);
  // Whether the ticket has completed (failed ones too: wait() then throws), without blocking.
  bool done(Ticket ticket);
  // Waits for every ticket; throws the first failure.
  void wait_all();

  bool direct() const { return direct_; }          // opened with O_DIRECT
  bool registered() const { return registered_; }  // requests use the registered buffers
  size_t size() const { return bytes_; }
  const std::filesystem::path& path() const { return path_; }
  // Requests in flight now (for tests: the queue is kept full).
  size_t in_flight() const { return in_flight_; }
  // The most requests that were in flight at once.
  size_t peak_in_flight() const { return peak_in_flight_; }

 private:
  struct Piece;
  struct Operation;
  struct Ring;
  Ticket submit(bool is_write, size_t offset, std::byte* data, size_t bytes);
  void issue_pending();
  // Takes one completion (blocking when `block`); returns false when none was ready.
  bool reap(bool block);
  void finish_piece(Piece* piece, int result);
  // The registered buffer holding [data, data + bytes), or -1 (not registered, or straddling two).
  int buffer_index(const std::byte* data, size_t bytes) const;
  static constexpr size_t kMaxRegisteredBytes = size_t{1} << 30;

  std::filesystem::path path_;
  size_t bytes_ = 0;
  UringFileOptions options_;
  int fd_ = -1;
  bool direct_ = false;
  bool registered_ = false;
  std::vector<std::span<std::byte>> buffers_;
  std::vector<std::span<std::byte>> registered_spans_;  // buffers_ in pieces of at most kMaxRegisteredBytes
  std::unique_ptr<Ring> ring_;
  std::deque<Piece*> pending_;  // cut but not yet submitted (the queue was full)
  std::unordered_map<Ticket, std::unique_ptr<Operation>> operations_;  // not yet waited for
  Ticket next_ticket_ = 1;
  size_t in_flight_ = 0;
  size_t peak_in_flight_ = 0;
};

// The error a completed request of `result` (io_uring's res: bytes moved, or -errno) fails with;
// nullopt when it moved something. A transfer of nothing makes no progress and would go again
// forever: a read then met the end of the file (0, which uring_failure_message names so), a write
// the file system took none of (a full disk: ENOSPC).
std::optional<int> transfer_failure(int result, bool is_write);

// "[disk tier] reading 16 MiB at offset 32 MiB of /scratch/f failed: EIO (Input/output error); ..."
std::string uring_failure_message(const std::filesystem::path& path, bool is_write, size_t offset,
                                  size_t bytes, int error, UringUse use = UringUse::DiskTier);

}  // namespace ferry
