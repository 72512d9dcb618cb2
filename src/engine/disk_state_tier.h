// The disk tier of optimizer state (DESIGN.md §7): the units the plan names keep their state
// (optim/state_arrays.h, moved as opaque bytes) in a preallocated file under disk_dir instead of
// host RAM, and the CPU updater sees it through a few RAM slots (planner/disk_tier_layout.h).
//
// The updater calls acquire(u) before updating a disk unit (its state is then in a slot) and
// release(u) after (the slot is written back behind it). Units are acquired in one fixed order
// that repeats every step (DiskTierLayout::order), so the tier reads ahead: while unit k is
// updated, the reads of units k+1 .. k+slots-1 are in flight (or done), and the write-back of k-1
// is on its way. A slot is read into only once its previous write-back has completed, and a unit
// is read only once its own last write-back has, so every read sees the last update. A read held
// back by a write-back still in flight is issued when the updater's worker next polls (poll(): while
// it waits for gradients), so the first update of a step finds its state in RAM when the disk keeps
// up.
//
// Out of steps (loading weights, checkpoints, resume), page_in(u) / page_out(u) move a unit's
// state synchronously through a slot; they discard what was read ahead (it is read again), since
// the caller may change the file under it.
//
// The file is a run's scratch (io/scratch_file.h): removed when the tier goes, and a dead run's
// is removed at the next start. Checkpoints hold the state; the file never outlives the run.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "io/scratch_file.h"
#include "io/uring_file.h"
#include "model/unit_layout.h"
#include "optim/host_array.h"
#include "planner/disk_tier_layout.h"
#include "planner/plan.h"

namespace ferry {

class DiskStateTier {
 public:
  // Creates the file under plan.disk_dir (refused with the numbers when the disk lacks room).
  DiskStateTier(const ModelLayout& layout, const Plan& plan);
  ~DiskStateTier();
  DiskStateTier(const DiskStateTier&) = delete;
  DiskStateTier& operator=(const DiskStateTier&) = delete;

  bool holds(size_t u) const { return u < on_disk_.size() && on_disk_[u]; }
  const DiskTierLayout& layout() const { return layout_; }
  const std::filesystem::path& path() const { return scratch_.path(); }

  // The state arrays of unit u in RAM, until release(u); blocks until its read has completed. The
  // units must come in layout().order, round after round.
  std::vector<std::span<std::byte>> acquire(size_t u);
  // The updater is done with u: its slot is written back (asynchronously).
  void release(size_t u);

  // No unit acquired: unit u's state, read now (or still in the slot from the last page_in of u),
  // valid until the next call to the tier. page_out writes the arrays page_in returned back to the
  // file; a caller that changed them must call it before asking the tier for anything else.
  std::vector<std::span<std::byte>> page_in(size_t u);
  void page_out(size_t u);
  // No unit acquired: a slot for unit u's first state, not read from the file (the caller writes
  // every array), until store_new(u) writes it there without waiting. The slots are taken in
  // turn, so the caller fills unit k + 1 while unit k is written: a run's start writes its state
  // at the disk's rate instead of reading every region first and waiting for each write.
  // Anything else the tier does waits for these writes first.
  std::vector<std::span<std::byte>> page_new(size_t u);
  void store_new(size_t u);
  // Issues the reads ahead that were held back by a write-back still in flight, if it has
  // completed since (never blocks). The updater's worker calls it while it waits for gradients:
  // otherwise the first unit of the next round would be read only when it is acquired.
  void poll();
  // Waits for every request in flight (write-backs included).
  void flush();
  // Acquires that found their unit's read not yet issued (nothing read ahead): the first after a
  // page_in, else a sign that the reads ahead are held back.
  size_t unready_acquires() const { return unready_acquires_; }
  // Reads of a unit's region from the file so far (reads ahead, acquires, page_in misses).
  size_t region_reads() const { return region_reads_; }

 private:
  size_t unit_at(int64_t sequence) const { return layout_.order[static_cast<size_t>(sequence) % n_]; }
  size_t slot_of(int64_t sequence) const { return static_cast<size_t>(sequence) % slots_; }
  std::span<std::byte> slot(size_t s, size_t bytes);
  std::vector<std::span<std::byte>> arrays_in(size_t s, size_t u);
  // Whether the read of `sequence` may be issued without blocking; issues it if so (or, with
  // `block`, waits for what it needs first).
  bool issue_read(int64_t sequence, bool block);
  void read_ahead();
  void forget_read_ahead();

  DiskTierLayout layout_;
  std::vector<bool> on_disk_;
  size_t n_ = 0, slots_ = 0;
  ScratchFile scratch_;  // declared before the file: removed after it is closed
  HostArray memory_;     // the slots, slots_ × slot_bytes
  std::unique_ptr<UringFile> file_;

  std::mutex mutex_;
  int64_t next_ = 0;    // sequence number (position in the repeating order) of the next acquire
  int64_t issued_ = 0;  // reads are issued for sequence numbers < issued_ (and >= next_, or held)
  int64_t held_ = -1;   // the sequence number acquired and not yet released
  size_t unready_acquires_ = 0;
  size_t region_reads_ = 0;
  std::vector<UringFile::Ticket> slot_read_, slot_write_;  // per slot; 0: none
  std::vector<UringFile::Ticket> unit_write_;              // per unit: its last write-back
  // The unit page_in holds: its slot belongs to the caller (no reads ahead) until page_out or the
  // next acquire; kFilling while page_new hands out slots (no reads ahead either), and from the
  // start until the first acquire: the file holds no state before it is written, and a read ahead
  // then would read unwritten regions into the slots the state is written through.
  static constexpr size_t kFilling = SIZE_MAX - 1;
  size_t paged_ = kFilling;
  size_t new_unit_ = SIZE_MAX, new_slot_ = 0;  // page_new's unit, and the slot it has
  size_t next_new_slot_ = 0;                   // the slot the next page_new takes
};

}  // namespace ferry
