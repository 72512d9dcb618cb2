#include "engine/disk_state_tier.h"

#include "core/byte_size.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"

namespace ferry {

namespace {

constexpr const char* kWhere = "disk tier";

const std::string& checked_dir(const Plan& plan) {
  FERRY_CHECK(!plan.disk_dir.empty(), kWhere,
              "the plan puts optimizer state on disk but names no directory; set disk_dir");
  return plan.disk_dir;
}

}  // namespace

DiskStateTier::DiskStateTier(const ModelLayout& layout, const Plan& plan)
    : layout_(disk_tier_layout(layout, plan)),
      n_(layout_.order.size()),
      slots_(layout_.slots),
      scratch_(checked_dir(plan)) {
  FERRY_ASSERT(n_ > 0 && slots_ >= 1, "a disk tier holds at least one unit and has a slot");
  on_disk_.assign(layout.units.size(), false);
  for (size_t u : layout_.order) on_disk_[u] = true;
  const size_t free = free_disk_bytes(plan.disk_dir);
  FERRY_CHECK(free >= layout_.file_bytes, kWhere,
              "the plan puts {} of optimizer state in disk_dir {}, which has {} free; free space there, give "
              "disk_dir on a disk with room, or lower disk_memory to what is free (the planner then keeps "
              "more state in RAM, or says which host_memory that needs)",
              format_bytes(layout_.file_bytes), plan.disk_dir, format_bytes(free));
  memory_ = HostArray(layout_.ram_bytes() / sizeof(float), "disk tier buffers");
  auto* base = reinterpret_cast<std::byte*>(memory_.data());
  file_ = std::make_unique<UringFile>(scratch_.path(), layout_.file_bytes,
                                      std::vector<std::span<std::byte>>{{base, layout_.ram_bytes()}});
  slot_read_.assign(slots_, 0);
  slot_write_.assign(slots_, 0);
  unit_write_.assign(layout.units.size(), 0);
  log_info(
      "disk tier: optimizer state of {} units ({}) in {}, through {} RAM buffers of {}; {}, {} registered "
      "buffers",
      n_, format_bytes(layout_.file_bytes), scratch_.path().string(), slots_,
      format_bytes(layout_.slot_bytes), file_->direct() ? "O_DIRECT" : "buffered (no O_DIRECT)",
      file_->registered() ? "with" : "without");
}

DiskStateTier::~DiskStateTier() = default;

std::span<std::byte> DiskStateTier::slot(size_t s, size_t bytes) {
  return {reinterpret_cast<std::byte*>(memory_.data()) + s * layout_.slot_bytes, bytes};
}

std::vector<std::span<std::byte>> DiskStateTier::arrays_in(size_t s, size_t u) {
  std::vector<std::span<std::byte>> arrays;
  const std::span<std::byte> region = slot(s, layout_.region_bytes[u]);
  for (size_t a = 0; a < layout_.array_offset[u].size(); ++a)
    arrays.push_back(region.subspan(layout_.array_offset[u][a], layout_.array_bytes[u][a]));
  return arrays;
}

bool DiskStateTier::issue_read(int64_t sequence, bool block) {
  FERRY_ASSERT(sequence == issued_, "reads are issued in order");
  const size_t s = slot_of(sequence), u = unit_at(sequence);
  // The slot's previous occupant, and the unit's previous round, must have been released.
  const int64_t released_below = held_ >= 0 ? held_ : next_;
  if (sequence - static_cast<int64_t>(slots_) >= released_below ||
      sequence - static_cast<int64_t>(n_) >= released_below) {
    FERRY_ASSERT(!block, "the read of the next unit needs nothing still held");
    return false;
  }
  // ... and written back: the slot is overwritten by the read, and the unit's bytes must be the
  // last update's.
  for (UringFile::Ticket* t : {&slot_write_[s], &unit_write_[u]}) {
    if (*t == 0) continue;
    if (!block && !file_->done(*t)) return false;
    file_->wait(*t);
    *t = 0;
  }
  slot_read_[s] = file_->read(layout_.region_offset[u], slot(s, layout_.region_bytes[u]));
  ++region_reads_;
  ++issued_;
  return true;
}

void DiskStateTier::read_ahead() {
  if (paged_ != SIZE_MAX) return;
  while (issued_ < next_ + static_cast<int64_t>(slots_) && issue_read(issued_, false)) {
  }
}

std::vector<std::span<std::byte>> DiskStateTier::acquire(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(held_ < 0 && new_unit_ == SIZE_MAX, "one disk unit is updated at a time");
  FERRY_ASSERT(unit_at(next_) == u, "disk-resident units are updated in the planned order");
  paged_ = SIZE_MAX;  // a step runs: whoever read state between steps is done with it
  if (issued_ <= next_) {
    ++unready_acquires_;
    issued_ = next_;
    issue_read(next_, true);
  }
  const size_t s = slot_of(next_);
  held_ = next_++;
  read_ahead();
  if (slot_read_[s] != 0) file_->wait(slot_read_[s]);
  slot_read_[s] = 0;
  return arrays_in(s, u);
}

void DiskStateTier::release(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(held_ >= 0 && unit_at(held_) == u, "release the unit acquired");
  const size_t s = slot_of(held_);
  const UringFile::Ticket t = file_->write(layout_.region_offset[u], slot(s, layout_.region_bytes[u]));
  slot_write_[s] = t;
  unit_write_[u] = t;
  held_ = -1;
  read_ahead();
}

void DiskStateTier::forget_read_ahead() {
  file_->wait_all();
  std::fill(slot_read_.begin(), slot_read_.end(), 0);
  std::fill(slot_write_.begin(), slot_write_.end(), 0);
  std::fill(unit_write_.begin(), unit_write_.end(), 0);
  issued_ = next_;
}

std::vector<std::span<std::byte>> DiskStateTier::page_in(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(held_ < 0 && holds(u) && new_unit_ == SIZE_MAX, "page_in is for disk units, between steps");
  const size_t s = slot_of(next_);
  // The unit paged in last, not written since: its slot holds the file's bytes. A checkpoint asks
  // for a unit's arrays once per tensor, and reads it from the disk once.
  if (paged_ == u) return arrays_in(s, u);
  forget_read_ahead();
  file_->wait(file_->read(layout_.region_offset[u], slot(s, layout_.region_bytes[u])));
  ++region_reads_;
  paged_ = u;
  return arrays_in(s, u);
}

void DiskStateTier::page_out(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(paged_ == u && held_ < 0 && issued_ == next_, "page_out writes what page_in read");
  const size_t s = slot_of(next_);
  file_->wait(file_->write(layout_.region_offset[u], slot(s, layout_.region_bytes[u])));
  paged_ = SIZE_MAX;
}

std::vector<std::span<std::byte>> DiskStateTier::page_new(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(held_ < 0 && holds(u) && new_unit_ == SIZE_MAX, "page_new is for disk units, between steps");
  if (paged_ != kFilling) {
    // Reads ahead (or a page_in's slot) hold slots: done with them first.
    forget_read_ahead();
    paged_ = kFilling;
  }
  const size_t s = next_new_slot_;
  next_new_slot_ = (next_new_slot_ + 1) % slots_;
  // The slot's last write has left it.
  if (slot_write_[s] != 0) file_->wait(slot_write_[s]);
  slot_write_[s] = 0;
  new_unit_ = u;
  new_slot_ = s;
  return arrays_in(s, u);
}

void DiskStateTier::store_new(size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  FERRY_ASSERT(new_unit_ == u && paged_ == kFilling, "store_new writes what page_new handed out");
  const UringFile::Ticket t =
      file_->write(layout_.region_offset[u], slot(new_slot_, layout_.region_bytes[u]));
  slot_write_[new_slot_] = t;
  unit_write_[u] = t;
  new_unit_ = SIZE_MAX;
}

void DiskStateTier::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  read_ahead();
}

void DiskStateTier::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Completed reads stay valid in their slots; only the tickets are done with.
  file_->wait_all();
  std::fill(slot_read_.begin(), slot_read_.end(), 0);
  std::fill(slot_write_.begin(), slot_write_.end(), 0);
  std::fill(unit_write_.begin(), unit_write_.end(), 0);
}

}  // namespace ferry
